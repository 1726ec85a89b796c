"""tether as a library: the default composition booted in one object.

::

    async with Tether(data_dir=path) as tether:
        handle = await tether.agents.create(cwd="/src")
        handle.agent.followup(UserMessage.text("hello"))
        await handle.agent.when_idle()

The bundled composition (``tether/tether.yml``) is patched by the overlays
given, in order (see :func:`tether.runtime.compose.overlay_rows`). A row that
fails to mount is reported in :attr:`Tether.problems` and logged; the other
rows keep running.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, cast

from tether.fence import environ
from tether.runtime import Runtime
from tether.runtime.compose import (
    Composer,
    RowProblem,
    overlay_rows,
    parse_composition,
    read_document,
)
from tether.runtime.errors import CompositionError
from tether.runtime.keys import ServiceKey

if TYPE_CHECKING:
    from tether.agent import AgentsView
    from tether.persist.cluster import Cluster
    from tether.persist.service import Persistence
    from tether.session.store import SessionStore

log = logging.getLogger(__name__)

S = TypeVar("S")

Overlay = Path | Mapping[str, object]

BUNDLED_COMPOSITION = Path(__file__).with_name("tether.yml")


def bundled_document() -> object:
    """The default composition shipped with tether, as a raw document.

    ``tether.yml`` is written in the JSON subset of YAML, so it loads
    without the YAML parser (see :func:`~tether.runtime.compose.parse_document`).
    """
    return read_document(BUNDLED_COMPOSITION)


def compose_document(
    overlays: Sequence[Overlay] = (),
    *,
    data_dir: str | os.PathLike[str] | None = None,
    model: str | None = None,
    sandbox: str | None = None,
    rules: Mapping[str, Sequence[str]] | None = None,
) -> object:
    """The bundled composition with ``overlays`` applied, then the direct settings.

    ``data_dir``, ``model`` and ``sandbox`` (a mode) are merged into the config
    of the ``persistence``, ``agent_loop`` and ``sandbox`` rows (other keys of
    those configs stay);
    ``data_dir`` also places the user's instruction file (``AGENTS.md`` there)
    and the per-day budget ledger (its ``budget`` directory) unless the
    ``agent_loop`` row names them.

    The permission rules add up rather than replace each other: the
    ``allow``, ``ask`` and ``deny`` lists of the ``permissions`` row are those
    of every overlay that sets them, in order, then ``rules`` (the flags'
    lists, by the same names). So do the user hooks: each event's matchers in
    the ``hooks`` row are those of every overlay that sets them, in order (the
    user's file and a project's both run, as in Claude Code).

    Raises:
        CompositionError: an overlay cannot be read or has the wrong shape.
    """
    directory = None if data_dir is None else Path(data_dir)
    document = bundled_document()
    gathered: Mapping[str, object] = {n: list((rules or {}).get(n, ())) for n in RULE_LISTS}
    listed: list[Mapping[str, object]] = []
    blocks: list[Mapping[str, list[object]]] = []
    for overlay in overlays:
        raw = read_document(overlay) if isinstance(overlay, Path) else overlay
        source = str(overlay) if isinstance(overlay, Path) else "overlay"
        document = overlay_rows(document, raw, source=source)
        listed.extend(_permission_lists(raw, source))
        blocks.extend(_hook_blocks(raw, source))
    document = _with_rules(document, [*listed, gathered])
    document = _with_hooks(document, blocks)
    document = _database_from_environment(document)
    settings: dict[str, dict[str, object]] = {
        "persistence": {"data_dir": directory},
        "agent_loop": {"model": model},
        "sandbox": {"mode": sandbox},
    }
    patches = []
    for row in document["plugins"] if isinstance(document, Mapping) else []:
        wanted = {k: v for k, v in settings.get(str(row.get("id")), {}).items() if v is not None}
        config_given = row.get("config")
        if (
            row.get("id") == "agent_loop"
            and directory is not None
            and not (isinstance(config_given, Mapping) and "user_instructions" in config_given)
        ):
            wanted["user_instructions"] = directory / "AGENTS.md"
        if (
            row.get("id") == "agent_loop"
            and directory is not None
            and not (isinstance(config_given, Mapping) and "budget_dir" in config_given)
        ):
            wanted["budget_dir"] = directory / "budget"
        if wanted:
            config = dict(row.get("config") or {})
            config.update({k: str(v) if isinstance(v, Path) else v for k, v in wanted.items()})
            patches.append({"id": row["id"], "config": config})
    if patches:
        document = overlay_rows(document, {"plugins": patches}, source="settings")
    return document


PERMISSIONS_ROW = "permissions"
RULE_LISTS = ("allow", "ask", "deny")
"""The permission rule lists, which add up across overlays and flags."""


def _permission_lists(document: object, source: str) -> list[Mapping[str, object]]:
    """The config of ``document``'s ``permissions`` row, if it sets one (a raw overlay
    already checked by :func:`overlay_rows`).

    Raises:
        CompositionError: a rule list of it is not a list.
    """
    rows = document.get("plugins") if isinstance(document, Mapping) else None
    found: list[Mapping[str, object]] = []
    for row in rows or ():
        config = row.get("config") if isinstance(row, Mapping) else None
        if row.get("id") != PERMISSIONS_ROW or not isinstance(config, Mapping):
            continue
        for name in RULE_LISTS:
            if not isinstance(config.get(name, []), list):
                raise CompositionError(
                    f"{source}: the permissions row's {name} must be a list of rules"
                )
        found.append(config)
    return found


def _with_rules(document: object, configs: Sequence[Mapping[str, object]]) -> object:
    """``document`` with its ``permissions`` row's rule lists set to those of ``configs``
    joined in order (each a list)."""
    joined: dict[str, list[object]] = {}
    for config in configs:
        for name in RULE_LISTS:
            joined.setdefault(name, []).extend(cast("list[object]", config.get(name, [])))
    if not any(joined.values()) or not isinstance(document, Mapping):
        return document
    current: object = None
    for row in document.get("plugins") or ():
        if isinstance(row, Mapping) and row.get("id") == PERMISSIONS_ROW:
            current = row.get("config")
    config = dict(current) if isinstance(current, Mapping) else {}
    config.update(joined)
    patch = {"plugins": [{"id": PERMISSIONS_ROW, "config": config}]}
    return overlay_rows(document, patch, source="permission rules")


HOOKS_ROW = "hooks"


def _hook_blocks(document: object, source: str) -> list[Mapping[str, list[object]]]:
    """The ``hooks`` block of ``document``'s ``hooks`` row, if it sets one (a raw overlay
    already checked by :func:`overlay_rows`).

    Raises:
        CompositionError: the block is not a mapping of event names to lists.
    """
    rows = document.get("plugins") if isinstance(document, Mapping) else None
    found: list[Mapping[str, list[object]]] = []
    for row in rows or ():
        config = row.get("config") if isinstance(row, Mapping) else None
        if row.get("id") != HOOKS_ROW or not isinstance(config, Mapping):
            continue
        block = config.get("hooks", {})
        if not isinstance(block, Mapping) or not all(
            isinstance(matchers, list) for matchers in block.values()
        ):
            raise CompositionError(
                f"{source}: the hooks row's hooks must map event names to lists of matchers"
            )
        found.append(cast("Mapping[str, list[object]]", block))
    return found


def _with_hooks(document: object, blocks: Sequence[Mapping[str, list[object]]]) -> object:
    """``document`` with its ``hooks`` row's ``hooks`` block set to ``blocks`` joined:
    each event's matchers, in order."""
    if len(blocks) < 2 or not isinstance(document, Mapping):
        return document  # one block (or none) is the row's as it is
    joined: dict[str, list[object]] = {}
    for block in blocks:
        for event, matchers in block.items():
            joined.setdefault(str(event), []).extend(matchers)
    current: object = None
    for row in document.get("plugins") or ():
        if isinstance(row, Mapping) and row.get("id") == HOOKS_ROW:
            current = row.get("config")
    config = dict(current) if isinstance(current, Mapping) else {}
    config["hooks"] = joined
    patch = {"plugins": [{"id": HOOKS_ROW, "config": config}]}
    return overlay_rows(document, patch, source="hooks")


DEFAULT_PERSISTENCE = "tether.persist.jsonl"
DATABASE_PERSISTENCE = "tether.persist.postgres"


def _database_from_environment(document: object) -> object:
    """With ``TETHER_DATABASE_URL`` set, the ``persistence`` row keeps sessions in
    PostgreSQL, unless the composition chose a backend other than the default."""
    if not environ().get("TETHER_DATABASE_URL") or not isinstance(document, Mapping):
        return document
    for row in document.get("plugins") or []:
        if (
            isinstance(row, Mapping)
            and row.get("id") == "persistence"
            and row.get("plugin") == DEFAULT_PERSISTENCE
        ):
            patch = {"id": "persistence", "plugin": DATABASE_PERSISTENCE}
            return overlay_rows(document, {"plugins": [patch]}, source="TETHER_DATABASE_URL")
    return document


class Tether:
    """A running tether: a runtime with the default composition mounted."""

    def __init__(
        self,
        *,
        overlays: Sequence[Overlay] = (),
        data_dir: str | os.PathLike[str] | None = None,
        model: str | None = None,
        document: object = None,
    ) -> None:
        """Compose from the bundled composition, ``overlays``, ``data_dir`` and
        ``model`` — or use ``document`` (a raw composition) as it is."""
        if document is None:
            document = compose_document(overlays, data_dir=data_dir, model=model)
        self._document = document
        self.runtime = Runtime()
        """The plugin runtime: ``runtime.ctx`` is the root context (the program's own)."""
        self.composer = Composer(self.runtime.ctx)
        """The composition's rows: ``row(id)``, ``rows()``, ``reload(id)``."""
        self.problems: tuple[RowProblem, ...] = ()
        """Rows that failed to mount at :meth:`start` (each also logged); the rest run."""

    async def start(self) -> Tether:
        """Mount every row; returns once they have settled."""
        report = await self.composer.apply(parse_composition(self._document, source="tether.yml"))
        self.problems = report.problems
        for problem in report.problems:
            log.error("%s", problem)
        return self

    @property
    def document(self) -> object:
        """The raw composition the rows were mounted from (its last :meth:`recompose`)."""
        return self._document

    async def recompose(self, document: object) -> tuple[RowProblem, ...]:
        """Bring the running rows in line with ``document`` (a raw composition).

        Rows are diffed by id (see :meth:`Composer.apply`): a changed row
        remounts, a new one mounts, an unchanged one keeps running. Returns
        the problems of the rows that failed (each also logged and added to
        :attr:`problems`); the rest run.
        """
        report = await self.composer.apply(parse_composition(document, source="tether.yml"))
        self._document = document
        self.problems = (*self.problems, *report.problems)
        for problem in report.problems:
            log.error("%s", problem)
        return report.problems

    async def stop(self) -> None:
        """Dispose everything; agents are torn down and their logs flushed.

        Rows go in reverse composition order (see :meth:`Composer.dispose`):
        the agent loop stops its agents, writing their closing ``turn/end``,
        before persistence unloads; whatever else the program mounted goes
        after that.
        """
        await self.composer.dispose()
        await self.runtime.dispose()

    async def __aenter__(self) -> Tether:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def has_row(self, row_id: str) -> bool:
        """Whether the composition has a row with this id."""
        return any(state.row.id == row_id for state in self.composer.rows())

    @property
    def agents(self) -> AgentsView:
        """``ctx.agents`` for the program: agents it creates are owned by the root.

        Raises:
            LookupError: the agents registry is not running (see :attr:`problems`).
        """
        from tether.agent.registry import AGENTS

        return self._require(AGENTS)

    @property
    def sessions(self) -> SessionStore:
        """The session store: the sessions live in this process.

        Raises:
            LookupError: the store is not running (see :attr:`problems`).
        """
        from tether.session.store import SESSIONS

        return self._require(SESSIONS)

    @property
    def persistence(self) -> Persistence:
        """Stored sessions: load, list, delete (and resume, through :attr:`agents`).

        Raises:
            LookupError: no persistence plugin is running (see :attr:`problems`).
        """
        from tether.persist.service import PERSISTENCE

        return self._require(PERSISTENCE)

    @property
    def cluster(self) -> Cluster:
        """Cross-host control of sessions kept in PostgreSQL: ``cancel(id)`` reaches
        the host that has the session live, wherever it runs.

        Raises:
            LookupError: sessions are not kept in PostgreSQL here.
        """
        from tether.persist.cluster import CLUSTER

        return self._require(CLUSTER)

    def _require(self, key: ServiceKey[S]) -> S:
        service = self.runtime.ctx.get(key)
        if service is None:
            raise LookupError(f"the {key.name!r} service is not running (see Tether.problems)")
        return service
