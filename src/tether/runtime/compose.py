"""Composition: a tree of plugins described by rows of a YAML file.

A composition file holds a list of rows under ``plugins``::

    plugins:
      - id: sessions
        plugin: tether.session.store
      - id: bash
        plugin: tether.plugins.tool_bash
        config: {wake_idle_owner: false}
      - id: experiment
        plugin: my_package.plugins:Experiment
        disabled: true

``plugin`` is an importable module path, ``module:attribute``, or the name of
an entry point in the ``tether.plugins`` group. Rows mount concurrently; order
comes only from what each plugin injects. A bad row fails alone, with a message
naming the row and the field, and the other rows keep running.

Applying an edited composition diffs rows by ``id``: rows whose definition
changed are remounted, removed rows are disposed, new rows are mounted, and
unchanged rows are left untouched.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from tether.runtime.errors import CompositionError, RuntimeFault
from tether.runtime.fiber import Fiber, FiberState
from tether.runtime.schema import FieldError, Schema, SchemaError, decode

if TYPE_CHECKING:
    from tether.runtime.context import Context

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "tether.plugins"


ROW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A row id: a letter or digit, then letters, digits, ``_``, ``.`` or ``-``; 64 at most."""


class PluginRow(Schema, frozen=True):
    """One row of a composition: which plugin, with what config, under which id."""

    id: str
    plugin: str
    config: Mapping[str, Any] = {}
    disabled: bool = False

    def __post_init__(self) -> None:
        if not ROW_ID.fullmatch(self.id):
            raise FieldError(
                ("id",),
                f"must be a letter or digit followed by up to 63 letters, digits, "
                f"'_', '.' or '-', got {self.id!r}",
            )
        if not self.plugin:
            raise FieldError(("plugin",), "must not be empty")


class RowProblem(msgspec.Struct, frozen=True):
    """Why one row could not be used."""

    row: str
    """The row's id, or ``#N`` (its 1-based position) when it has no valid id."""
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.message}"


class Composition(msgspec.Struct, frozen=True):
    """Parsed rows plus the rows that were rejected while parsing."""

    rows: tuple[PluginRow, ...]
    problems: tuple[RowProblem, ...] = ()


def parse_composition(document: object, *, source: str = "<composition>") -> Composition:
    """Validate a loaded YAML document row by row.

    Raises:
        CompositionError: the document as a whole has the wrong shape (each bad
            row is reported in ``Composition.problems`` instead).
    """
    if document is None:
        return Composition(())
    if not isinstance(document, Mapping) or set(document) - {"plugins"}:
        raise CompositionError(f"{source}: expected a mapping with one key, 'plugins'")
    raw_rows = document.get("plugins") or []
    if not isinstance(raw_rows, list):
        raise CompositionError(f"{source}: 'plugins' must be a list of rows")
    rows: list[PluginRow] = []
    problems: list[RowProblem] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rows, start=1):
        label = f"#{index}"
        if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
            label = repr(raw["id"])
        if not isinstance(raw, Mapping):
            problems.append(RowProblem(label, f"{source}: a row must be a mapping, got {raw!r}"))
            continue
        try:
            row = decode(PluginRow, raw, root="")
        except SchemaError as exc:
            problems.append(RowProblem(label, f"{source}: {exc}"))
            continue
        if row.id in seen:
            problems.append(RowProblem(label, f"{source}: duplicate id (an earlier row has it)"))
            continue
        seen.add(row.id)
        rows.append(row)
    return Composition(tuple(rows), tuple(problems))


def read_document(path: Path) -> object:
    """Read a composition file as a YAML document (not yet validated).

    Raises:
        CompositionError: the file cannot be read or is not valid YAML.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CompositionError(f"cannot read composition {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CompositionError(
            f"{path}: not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None
    return parse_document(text, source=str(path))


def parse_document(text: str, *, source: str) -> object:
    """Parse composition text: YAML, read through the JSON parser when it is plain JSON.

    JSON is a subset of YAML. Documents written in that subset (the bundled
    composition is) load without importing the YAML parser, which is a
    measurable part of starting a command.

    Raises:
        CompositionError: the text is not valid YAML.
    """
    if text.lstrip().startswith("{"):
        import json

        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML flow style is not always JSON: let the YAML parser decide.
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CompositionError(_yaml_problem(exc, source)) from None


def _yaml_problem(exc: object, source: str) -> str:
    """One line for a YAML error: ``source:LINE:COLUMN: invalid YAML: what``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    what = ": ".join(str(part) for part in (context, problem) if part) or " ".join(str(exc).split())
    if mark is None:
        return f"{source}: invalid YAML: {what}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {what}"


def load_composition(path: Path) -> Composition:
    """Read and parse a composition file.

    Raises:
        CompositionError: the file cannot be read or is not valid YAML.
    """
    return parse_composition(read_document(path), source=str(path))


def overlay_rows(base: object, overlay: object, *, source: str) -> dict[str, object]:
    """Patch the rows of ``base`` with those of ``overlay``, by id.

    An overlay row whose id exists replaces the fields it names (``config``
    is replaced whole, not merged; ``disabled: true`` turns the row off); an
    overlay row with a new id is added after the base rows. Both documents
    are raw YAML; the result is validated by :func:`parse_composition`.

    Raises:
        CompositionError: ``overlay`` does not have the shape of a composition
            (the message names ``source``), or an overlay row has no id.
    """
    base_rows = _raw_rows(base, "base composition")
    rows = {str(row.get("id")): dict(row) for row in base_rows}
    order = list(rows)
    for index, patch in enumerate(_raw_rows(overlay, source), start=1):
        row_id = patch.get("id")
        if not isinstance(row_id, str):
            raise CompositionError(f"{source}: row #{index} has no id")
        if row_id in rows:
            rows[row_id].update(patch)
        else:
            rows[row_id] = dict(patch)
            order.append(row_id)
    return {"plugins": [rows[row_id] for row_id in order]}


def _raw_rows(document: object, source: str) -> list[Mapping[str, object]]:
    if document is None:
        return []
    if not isinstance(document, Mapping) or set(document) - {"plugins"}:
        raise CompositionError(f"{source}: expected a mapping with one key, 'plugins'")
    rows = document.get("plugins") or []
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise CompositionError(f"{source}: 'plugins' must be a list of rows (mappings)")
    return rows


class ResolvedPlugin(msgspec.Struct, frozen=True):
    """A row's ``plugin`` reference, imported."""

    plugin: object
    module: ModuleType
    """The module the plugin's code lives in: what a reload re-imports."""
    attr: str | None
    """The dotted attribute path inside ``module``; ``None`` when the module is the plugin."""

    def from_module(self, module: ModuleType) -> object:
        """The same attribute path, looked up in another version of the module."""
        return module if self.attr is None else lookup_attr(module, self.attr)


def lookup_attr(module: ModuleType, attr: str) -> object:
    """Follow a dotted attribute path from ``module`` (raises AttributeError)."""
    target: object = module
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def resolve_plugin(reference: str) -> ResolvedPlugin:
    """Import the plugin a row names.

    Raises:
        CompositionError: the module, attribute or entry point does not exist.
    """
    module_name, _, attr = reference.partition(":")
    if "." not in module_name and not attr:
        # Imported here: reading package metadata is slow, and most rows name modules.
        from importlib.metadata import entry_points

        found = entry_points(group=ENTRY_POINT_GROUP, name=module_name)
        if found:
            module_name, _, attr = next(iter(found)).value.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CompositionError(f"cannot import plugin {reference!r}: {exc}") from None
    if not attr:
        return ResolvedPlugin(module, module, None)
    try:
        return ResolvedPlugin(lookup_attr(module, attr), module, attr)
    except AttributeError:
        raise CompositionError(
            f"plugin {reference!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None


class RowState(msgspec.Struct):
    """What the composer knows of one row."""

    row: PluginRow
    fiber: Fiber | None = None
    error: str | None = None

    @property
    def status(self) -> str:
        if self.row.disabled:
            return "disabled"
        if self.error is not None:
            return "failed"
        return str(self.fiber.state) if self.fiber is not None else "unmounted"


class ApplyReport(msgspec.Struct, frozen=True):
    """What :meth:`Composer.apply` did, row id by row id."""

    mounted: tuple[str, ...] = ()
    remounted: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    problems: tuple[RowProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


class Composer:
    """Mounts rows under one parent context and keeps them in step with a composition."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._rows: dict[str, RowState] = {}
        self._lock = asyncio.Lock()

    @property
    def ctx(self) -> Context:
        return self._ctx

    def rows(self) -> list[RowState]:
        return list(self._rows.values())

    def row(self, row_id: str) -> RowState:
        """The state of one row.

        Raises:
            CompositionError: no row has this id.
        """
        try:
            return self._rows[row_id]
        except KeyError:
            raise CompositionError(f"no row with id {row_id!r}") from None

    async def apply(self, composition: Composition | Sequence[PluginRow]) -> ApplyReport:
        """Bring the mounted rows in line with ``composition`` (diffing by id).

        Returns once every mounted row has settled (active, pending on a
        service nobody provides, or failed); problems are reported, not raised.
        """
        if not isinstance(composition, Composition):
            composition = Composition(tuple(composition))
        async with self._lock:
            wanted = {row.id: row for row in composition.rows}
            removed = [rid for rid in self._rows if rid not in wanted]
            changed = [
                rid
                for rid, row in wanted.items()
                if rid in self._rows and self._rows[rid].row != row
            ]
            unchanged = [
                rid
                for rid, row in wanted.items()
                if rid in self._rows and self._rows[rid].row == row
            ]
            added = [rid for rid in wanted if rid not in self._rows]
            await asyncio.gather(*(self._unmount(rid) for rid in (*removed, *changed)))
            for rid in removed:
                del self._rows[rid]
            for rid in (*changed, *added):
                self._rows[rid] = RowState(wanted[rid])
            problems = list(composition.problems)
            mounted = [self._mount(self._rows[rid]) for rid in (*changed, *added)]
            problems.extend(p for p in mounted if p is not None)
            problems.extend(await self._settle([*changed, *added]))
            return ApplyReport(
                mounted=tuple(added),
                remounted=tuple(changed),
                removed=tuple(removed),
                unchanged=tuple(unchanged),
                problems=tuple(problems),
            )

    async def dispose(self) -> None:
        """Dispose every row's fiber, one row at a time, last row first.

        Rows mount concurrently, but teardown goes in reverse composition
        order, like a stack: rows listed later (consumers, such as the agent
        loop) finish their teardown — and the durable writes it makes — while
        the rows listed before them (infrastructure, such as persistence) are
        still running. Sibling rows that share no ``inject`` relation would
        otherwise be unloaded concurrently.
        """
        async with self._lock:
            for row_id in reversed(list(self._rows)):
                await self._unmount(row_id)
            self._rows.clear()

    def _mount(self, state: RowState) -> RowProblem | None:
        row = state.row
        if row.disabled:
            return None
        try:
            resolved = resolve_plugin(row.plugin)
            state.fiber = self._ctx.plugin(resolved.plugin, row.config, label=row.id)
        except RuntimeFault as exc:
            state.error = str(exc)
            return RowProblem(repr(row.id), str(exc))
        return None

    async def _settle(self, row_ids: Iterable[str]) -> list[RowProblem]:
        await self._ctx.runtime.idle()
        problems = []
        for rid in row_ids:
            state = self._rows[rid]
            fiber = state.fiber
            if fiber is not None and fiber.state is FiberState.FAILED:
                state.error = f"failed to start: {fiber.error}"
                problems.append(RowProblem(repr(rid), state.error))
        return problems

    async def _unmount(self, row_id: str) -> None:
        state = self._rows[row_id]
        if state.fiber is not None:
            await state.fiber.dispose()
            state.fiber = None
        state.error = None

    def adopt_fiber(self, row_id: str, fiber: Fiber) -> None:
        """Record that ``fiber`` now runs ``row_id`` (used by reload)."""
        self._rows[row_id].fiber = fiber
        self._rows[row_id].error = None

    async def reload(self, row_id: str) -> None:
        """Re-import the row's plugin module and remount its fibers (see :mod:`.reload`).

        Raises:
            ReloadError: the new code failed to import or start; the old code
                was restored and keeps running.
        """
        from tether.runtime.reload import reload_row

        async with self._lock:
            await reload_row(self, row_id)
