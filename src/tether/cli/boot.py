"""Turning command-line options into a composed tether."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

from tether.cli.failures import StartRefusedError, describe
from tether.cli.process import end_startup
from tether.location import data_dir as default_data_dir

if TYPE_CHECKING:
    from tether.agent import Agent, AgentHandle
    from tether.host import Overlay, Tether
    from tether.llm.adapters.settings import ModelSettings
    from tether.session.log import Session
    from tether.session.model import ModelChoice


class UsageError(Exception):
    """A bad command-line argument; reported on stderr with exit code 2."""


class ModelChoiceError(UsageError):
    """The model asked for (``--model``, the configuration, the environment)
    cannot be used here: the message says what to set."""


def data_dir_of(args: argparse.Namespace) -> Path:
    explicit: Path | None = args.data_dir
    return default_data_dir(explicit)


def overlays_of(args: argparse.Namespace) -> list[Overlay]:
    """The user overlay (``$TETHER_HOME/tether.yml``, if present), then each ``--config``."""
    overlays: list[Overlay] = []
    user = data_dir_of(args) / "tether.yml"
    if user.is_file():
        overlays.append(user)
    for path in args.config or []:
        if not path.is_file():
            raise UsageError(f"--config {path}: no such file")
        overlays.append(path)
    return overlays


def composed(
    args: argparse.Namespace, *, with_model: bool, model: str | None = None, notice: bool = True
) -> object:
    """The composition document the options describe.

    With ``with_model``, the model is resolved first (``--model``, else the
    configuration's ``agent_loop`` model, ``--base-url``, then the environment;
    see ``docs/models.md``) and its adapter rows are added; a choice that
    cannot work is a usage error before anything starts, and the offline
    fallback's notice is printed on stderr (unless ``notice`` is false: a command
    that shows the model itself, or whose stderr is a log). A command that resumes a session
    without ``--model`` leaves the model to the session (:func:`open_for`):
    its ``--base-url`` is the session's, and no notice is printed.

    Raises:
        UsageError: a bad overlay path, or a model choice that cannot work.
    """
    from tether.host import compose_document

    document = compose_document(
        overlays_of(args),
        data_dir=data_dir_of(args),
        sandbox=getattr(args, "sandbox", None),
        rules=rules_of(args),
    )
    if any(getattr(args, flag, None) is not None for flag in BUDGET_FLAGS):
        from tether.cli.budget import with_budget

        document = with_budget(cast("Mapping[str, object]", document), args)
    if not with_model:
        return document
    base_url = getattr(args, "base_url", None)
    resuming = not model and resumes(args)
    settings = model_settings(
        document, model or configured_model(document), None if resuming else base_url
    )
    if settings.notice and notice and not resuming:
        print(settings.notice, file=sys.stderr)
    # compose_document hands back the composition as a mapping of rows.
    return settings.apply_to(cast("Mapping[str, object]", document))


def rules_of(args: argparse.Namespace) -> dict[str, list[str]]:
    """The permission rules of ``--allow``, ``--ask`` and ``--deny``, by list.

    Raises:
        UsageError: a rule cannot be read (the message names the flag and the rule).
    """
    from tether.front.rules import RuleError, parse_rule

    lists: dict[str, list[str]] = {}
    for name in ("allow", "ask", "deny"):
        texts = list(getattr(args, f"{name}_rules", None) or [])
        for text in texts:
            try:
                parse_rule(text)
            except RuleError as exc:
                raise UsageError(f"--{name}: {exc}") from None
        lists[name] = texts
    return lists


def resumes(args: argparse.Namespace) -> bool:
    """Whether the command continues a stored session (``--resume`` or ``--continue``)."""
    return getattr(args, "resume", None) is not None or bool(getattr(args, "continue_", False))


def model_settings(document: object, model: str | None, base_url: str | None) -> ModelSettings:
    """The checked choice of ``model`` at ``base_url`` for ``document``'s composition.

    Raises:
        UsageError: the choice cannot work (the message says what to set).
    """
    from tether.llm.adapters.settings import ModelSettingsError, resolve_model_settings

    try:
        return resolve_model_settings(
            model=model,
            base_url=base_url,
            # A provider tether does not know may come from a plugin of the
            # composition: it is accepted here and checked once mounted.
            extra_providers=[*configured_providers(document), *unknown_provider(model)],
        )
    except ModelSettingsError as exc:
        raise ModelChoiceError(str(exc)) from None


def configured_model(document: object) -> str | None:
    """The model the ``agent_loop`` row of ``document`` names (``tether.yml``, ``--config``),
    or ``None`` (the bundled composition names none; a blank one counts as none).

    Raises:
        UsageError: it names something that is not a string.
    """
    row = _row(document, AGENT_LOOP_ROW)
    config = row.get("config") if row is not None else None
    model = config.get("model") if isinstance(config, dict) else None
    if model is not None and not isinstance(model, str):
        raise ModelChoiceError(f"the agent_loop row's model must be PROVIDER:MODEL, not {model!r}")
    return model.strip() or None if model is not None else None


def _row(document: object, row_id: str) -> dict[str, object] | None:
    rows = document.get("plugins") if isinstance(document, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("id") == row_id:
            return row
    return None


def unknown_provider(model: str | None) -> list[str]:
    """The provider of ``model`` when it is none of the built-in ones."""
    from tether.llm.adapters.providers import PRESETS
    from tether.llm.offline import PROVIDER as OFFLINE
    from tether.llm.request import parse_model_ref

    if not model or not model.strip():
        return []
    try:
        provider, _name = parse_model_ref(model.strip())
    except ValueError:
        return []
    return [] if provider in PRESETS or provider == OFFLINE else [provider]


def composed_model(tether: Tether) -> str | None:
    """The model of the composed agent loop (its ``model`` setting), or ``None``
    when no agent loop row started."""
    choice = composed_choice(tether)
    return None if choice is None else choice.model


def composed_choice(tether: Tether) -> ModelChoice | None:
    """The model and base URL the composed agent loop gives new sessions, or
    ``None`` when no agent loop row started."""
    from tether.session.model import ModelChoice

    loop = tether.composer.row(AGENT_LOOP_ROW).fiber if tether.has_row(AGENT_LOOP_ROW) else None
    if loop is None or loop.config is None:
        return None
    return ModelChoice(str(loop.config.model), loop.config.base_url)


def session_line(tether: Tether, agent: Agent) -> str:
    """``session ID · MODEL``: what ``run`` and ``chat`` say first, once the
    session exists."""
    return f"session {agent.id} · {session_choice(tether, agent.session).model}"


def session_choice(tether: Tether, session: Session, *, at: int | None = None) -> ModelChoice:
    """The model of ``session``'s request at seq ``at`` (default: its next one), the
    composition's model as the configured one (:func:`tether.session.model.session_model`)."""
    from tether.session.model import session_model

    return session_model(session, configured=composed_model(tether), at=at)


def check_model_provider(tether: Tether) -> None:
    """After boot: the agent loop's model must have a registered provider.

    Raises:
        UsageError: nobody registered it; the message lists who did.
    """
    from tether.llm.request import parse_model_ref
    from tether.llm.service import LLM

    llm = tether.runtime.ctx.get(LLM)
    model = composed_model(tether)
    if llm is None or model is None:
        return
    provider = parse_model_ref(model)[0]
    if provider not in llm.providers():
        known = ", ".join(sorted(llm.providers())) or "none"
        raise ModelChoiceError(
            f"unknown model provider {provider!r} in {model!r}; registered providers: {known}"
        )


def configured_providers(document: object) -> list[str]:
    """Providers the composition itself configures (``providers`` of the ``openai`` row)."""
    row = _row(document, "openai")
    config = row.get("config") if row is not None else None
    providers = config.get("providers") if isinstance(config, dict) else None
    return [str(name) for name in providers] if isinstance(providers, dict) else []


def build(
    args: argparse.Namespace,
    *,
    model: str | None = None,
    with_model: bool = True,
    notice: bool = True,
) -> Tether:
    from tether.host import Tether

    return Tether(document=composed(args, with_model=with_model, model=model, notice=notice))


async def start(
    args: argparse.Namespace,
    *,
    model: str | None = None,
    with_model: bool = True,
    persistent: bool = False,
    quiet_rows: tuple[str, ...] = (),
    notice: bool = True,
) -> Tether:
    """Compose and start tether; rows that failed are reported on stderr.

    Start-up ends here, booted or not: a garbage collector the command paused resumes.
    With ``persistent`` (the commands that run agents), tether never runs
    unpersisted: if the composition's persistence row did not start, or
    storage cannot be written now, it stops again and refuses. Problems of
    ``quiet_rows`` are left for the caller to report.

    Raises:
        UsageError: as :func:`composed`.
        StartRefusedError: ``persistent``, and sessions could not be stored.
    """
    try:
        tether = build(args, model=model, with_model=with_model, notice=notice)
        with _row_failures_said_once(verbose=getattr(args, "verbose", False)):
            await tether.start()
    finally:
        end_startup()
    if getattr(args, "dev", False):
        from tether.runtime.reload import watch

        await watch(tether.composer)
        print("tether: dev mode: plugin modules reload when their files change", file=sys.stderr)
    if with_model or persistent:
        try:
            if with_model:
                check_model_provider(tether)
                if budget_kept(tether):
                    from tether.cli.budget import check_budget

                    check_budget(tether)
            if persistent:
                await check_persistence(tether)
                check_agent_loop(tether)
                check_permissions(tether)
        except (UsageError, StartRefusedError):
            await tether.stop()
            raise
    for problem in tether.problems:
        if problem.row not in [repr(row) for row in quiet_rows]:
            print(f"tether: {problem}", file=sys.stderr)
    return tether


def row_problem(tether: Tether, row: str) -> str:
    """Why row ``row`` did not start (its problems, joined), or a generic reason."""
    reasons = [p.message for p in tether.problems if p.row == repr(row)]
    return "; ".join(reasons) or f"the {row} row did not start"


PERSISTENCE_ROW = "persistence"

BUDGET_FLAGS = (
    "max_budget_usd",
    "max_turn_usd",
    "max_day_usd",
    "max_budget_tokens",
    "max_turn_tokens",
    "max_day_tokens",
    "max_cluster_day_usd",
    "max_cluster_day_tokens",
)
"""The attributes of the budget flags (:mod:`tether.cli.budget`)."""


def budget_kept(tether: Tether) -> bool:
    """Whether the composed agent loop keeps a spend budget."""
    loop = tether.composer.row(AGENT_LOOP_ROW).fiber if tether.has_row(AGENT_LOOP_ROW) else None
    return loop is not None and loop.config is not None and loop.config.budget is not None


AGENT_LOOP_ROW = "agent_loop"


def check_agent_loop(tether: Tether) -> None:
    """Refuse to go on when the composition's agent loop row failed to start.

    Its configured agents are created as it starts: one whose session id
    another process holds or has stored is refused there, and the command
    is refused with it, in one line, rather than running without agents.

    Raises:
        UsageError: the row failed (exit 2), saying why.
    """
    problems = [str(p) for p in tether.problems if p.row == repr(AGENT_LOOP_ROW)]
    if problems:
        raise UsageError("; ".join(problems))


PERMISSIONS_ROW = "permissions"

GUARD_ROWS = (PERMISSIONS_ROW, "hooks")
"""The rows an agent never runs without: the permission rules and the user's hooks."""


def check_permissions(tether: Tether) -> None:
    """Refuse to run agents when the permission rules or the hooks did not start (a rule
    or a hook's config that cannot be read): an agent never runs without the rules and
    hooks the user set.

    Raises:
        UsageError: a row failed (exit 2), saying why.
    """
    rows = {repr(row) for row in GUARD_ROWS}
    problems = [p.message for p in tether.problems if p.row in rows]
    if problems:
        raise UsageError("; ".join(problems))


class _RowFailureFilter(logging.Filter):
    """Holds back the runtime's log lines about rows that failed to start.

    The command reports each such row itself, in one line (or refuses to
    start, saying why), so the same failure is not said three times.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name in ("tether.host", "tether.runtime.fiber")
            and record.levelno == logging.ERROR
            and record.exc_info is None
        )


@contextmanager
def _row_failures_said_once(*, verbose: bool) -> Iterator[None]:
    if verbose:
        yield
        return
    handlers = logging.getLogger().handlers
    quiet = _RowFailureFilter()
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


async def check_persistence(tether: Tether) -> None:
    """Refuse to go on when the composition's persistence row cannot store sessions.

    A composition without that row keeps sessions in memory on purpose.

    Raises:
        StartRefusedError: the row failed to start, or a write cannot reach the disk.
    """
    if not tether.has_row(PERSISTENCE_ROW):
        return
    from tether.persist.service import PERSISTENCE

    persistence = tether.runtime.ctx.get(PERSISTENCE)
    if persistence is None:
        raise StartRefusedError(
            f"sessions cannot be stored ({row_problem(tether, PERSISTENCE_ROW)}); "
            "refusing to run unpersisted"
        )
    try:
        await persistence.check_writable()
    except Exception as exc:
        reason = describe(exc)
        if reason is None:
            raise
        raise StartRefusedError(
            f"sessions cannot be stored ({reason}); refusing to run unpersisted"
        ) from None


def existing_dir(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a directory")
    return path.resolve()


async def open_agent(
    tether: Tether,
    *,
    resume: str | None,
    cwd: str,
    resume_latest: bool = False,
    reasons: list[str] | None = None,
) -> AgentHandle | None:
    """Resume the stored session ``resume`` (an id or a unique prefix of one;
    :data:`PICK`: the one the person picks), or with ``resume_latest`` the most
    recently active session of ``cwd``; else create an agent in ``cwd``.

    A reason it cannot (a corrupt or live session, no agent loop) is printed
    on stderr as one line (and added to ``reasons``), and ``None`` is returned.

    Raises:
        UsageError: no stored session matches (exit 2, like any bad argument).
    """
    from tether.agent import AgentError
    from tether.persist.backends.errors import LogStoreError
    from tether.session import SessionError

    try:
        if resume == PICK:
            return await tether.agents.resume(await pick_session(tether, cwd=cwd))
        if resume or resume_latest:
            session_id = await resolve_session(tether, resume, cwd=cwd)
            return await tether.agents.resume(session_id)
        return await tether.agents.create(cwd=cwd)
    except (AgentError, LookupError, LogStoreError, SessionError) as exc:
        _refused(str(exc), reasons)
        return None


def _refused(reason: str, reasons: list[str] | None) -> None:
    """Say why a session cannot be opened, and keep it for a JSON result."""
    print(f"tether: {reason}", file=sys.stderr)
    if reasons is not None:
        reasons.append(reason)


async def open_for(
    tether: Tether, args: argparse.Namespace, *, cwd: str, reasons: list[str] | None = None
) -> AgentHandle | None:
    """:func:`open_agent` as ``run`` and ``chat`` ask for it (``--resume``,
    ``--continue``): a new session once it is stored (its header, so the id
    the command shows names a session on disk), a resumed one on the model it
    ran on, or the one ``--model``/``--base-url`` give (:func:`continue_on`);
    ``None`` once the reason it cannot is printed (and added to ``reasons``).
    ``--fork ID[@TURN]`` stores a branch of that session first, and resumes it."""
    if getattr(args, "fork", None) and not await _forked(tether, args, cwd, reasons):
        return None
    resuming = resumes(args)
    handle = await open_agent(
        tether, resume=args.resume, resume_latest=args.continue_, cwd=cwd, reasons=reasons
    )
    if handle is None:
        return None
    if not resuming:
        verbose = bool(getattr(args, "verbose", False))
        return await _stored(handle, verbose=verbose, reasons=reasons)
    unusable = await continue_on(tether, handle.agent, model=args.model, base_url=args.base_url)
    if unusable is None:
        return handle
    _refused(unusable, reasons)
    await handle.dispose()
    return None


async def _forked(
    tether: Tether, args: argparse.Namespace, cwd: str, reasons: list[str] | None
) -> bool:
    """``--fork``: the branch is stored, and ``args`` resume it; ``False`` once the reason
    it is not is printed.

    Raises:
        UsageError: ``--resume`` or ``--continue`` too, or no stored session matches.
    """
    from tether.cli.rewind import REWIND_ERRORS, fork_from
    from tether.persist.backends.errors import LogStoreError
    from tether.session import SessionError

    if resumes(args):
        raise UsageError("--fork starts a new branch: give it without --resume or --continue")
    try:
        forked = await fork_from(tether, args.fork, cwd=cwd)
    except (LookupError, LogStoreError, SessionError, *REWIND_ERRORS) as exc:
        _refused(str(exc), reasons)
        return False
    args.resume, args.fork = forked.id, None
    return True


async def _stored(
    handle: AgentHandle, *, verbose: bool, reasons: list[str] | None
) -> AgentHandle | None:
    """``handle`` once its new session is on disk (its id may be shown); else ``None``,
    the reason printed and the agent disposed."""
    from tether.cli.ending import acknowledge, dispose_reporting

    unstored = await acknowledge(handle.agent, created=True)
    if unstored is None:
        return handle
    if reasons is not None:
        reasons.append(unstored)
    _failed, release_logs = await dispose_reporting(handle, unstored, verbose=verbose)
    release_logs()
    return None


async def continue_on(
    tether: Tether, agent: Agent, *, model: str | None, base_url: str | None
) -> str | None:
    """Make a resumed session go on on the model it ran on, or on the one given.

    The session's model is :func:`tether.session.model.session_model`'s: the
    model and base URL its log says. ``model`` (``--model``, composed already)
    replaces both, ``base_url`` (``--base-url``) the base URL; a change is
    logged as ``session/config`` (``model``, then ``base_url``), so a later
    resume keeps it. The provider's rows are then composed for that choice
    when the composition does not reach it already (the key is read from the
    environment, as for a new session). Returns why the session cannot go on,
    in one line, or ``None``.
    """
    from tether.masking import without_credentials
    from tether.session.model import ModelChoice
    from tether.session.settings import BASE_URL_OPTION, MODEL_OPTION, ConfigChanged

    session = agent.session
    composed = composed_choice(tether)
    current = session_choice(tether, session)
    target = current
    if model and composed is not None:
        target = composed
    if base_url and base_url.strip():
        target = ModelChoice(target.model, base_url.strip())
    unreachable = await reach(tether, target, session=agent.id)
    if unreachable is not None:
        return unreachable
    if target.model != current.model:
        session.append(ConfigChanged(option=MODEL_OPTION, value=target.model))
        current = ModelChoice(target.model)
    recorded = None if target.base_url is None else without_credentials(target.base_url)
    if recorded is not None and recorded != current.base_url:
        session.append(ConfigChanged(option=BASE_URL_OPTION, value=recorded))
    return None


async def reach(tether: Tether, choice: ModelChoice, *, session: str | None) -> str | None:
    """Compose the rows ``choice`` needs, unless the running rows reach it already.

    A provider tether knows (``docs/models.md``) gets its adapter row, at
    ``choice.base_url`` when one is set, with its key from the environment;
    rows that do not change keep running. Returns why ``choice`` cannot be
    reached, in one line, or ``None``: said of ``session``, which runs on it,
    or (``None``) of a switch to it.
    """
    from tether.llm.adapters.providers import PRESETS
    from tether.llm.request import parse_model_ref
    from tether.llm.service import LLM

    model = repr(choice.model)
    subject = f"session {session} uses model {model}" if session else f"cannot switch to {model}"
    try:
        provider = parse_model_ref(choice.model)[0]
    except ValueError:
        if session is None:
            return f"{subject}: it is not a model reference (PROVIDER:MODEL, docs/models.md)"
        return f"session {session} names a model tether cannot read ({model}); give --model"
    llm = tether.runtime.ctx.get(LLM)
    if llm is None:
        return None
    composed = composed_choice(tether)
    same_endpoint = choice.base_url is None or (composed is not None and composed == choice)
    if provider in llm.providers() and same_endpoint:
        return None
    if provider not in PRESETS:
        advice = "configure it, or give --model to continue with another"
        if session is None:
            advice = "configure it first (docs/models.md)"
        return f"{subject}, whose provider is not configured here; {advice}"
    try:
        settings = model_settings(tether.document, choice.model, choice.base_url)
    except UsageError as exc:
        return f"{subject}: {exc}"
    problems = await tether.recompose(
        settings.with_rows(cast("Mapping[str, object]", tether.document))
    )
    if problems:
        return "; ".join(str(problem) for problem in problems)
    return None


PICK = ""
"""``--resume`` given without an id: the person picks one of the directory's sessions."""

PICKER_SIZE = 10
"""How many of the directory's most recent sessions the picker offers."""


async def pick_session(tether: Tether, *, cwd: str) -> str:
    """Ask on the terminal which of ``cwd``'s recent sessions to resume; its id.

    The choices go to stderr, most recently active first, numbered; the
    answer is read from stdin (Enter takes the first).

    Raises:
        UsageError: stdin is not a terminal, the directory has no stored
            session, or the answer is not one of the numbers.
    """
    from tether.cli.terminal import is_terminal, read_line
    from tether.persist.service import PERSISTENCE

    if not is_terminal(sys.stdin):
        raise UsageError(
            "--resume without an id asks on the terminal which session; give an id, or --continue"
        )
    persistence = tether.runtime.ctx.get(PERSISTENCE)
    summaries = [] if persistence is None else await persistence.list()
    choices = [s for s in summaries if s.cwd == cwd and s.error is None][:PICKER_SIZE]
    if not choices:
        raise UsageError(f"no stored session in {cwd} to resume")
    for number, summary in enumerate(choices, start=1):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.last_activity))
        title = " ".join((summary.title or "").split())[:60]
        print(f"{number:>3}  {when}  {summary.id}  {title}", file=sys.stderr)
    print(f"resume which? [1-{len(choices)}, Enter: 1] ", end="", file=sys.stderr, flush=True)
    answer = (await read_line(sys.stdin)).strip()
    if not answer:
        return choices[0].id
    if not answer.isdigit() or not 1 <= int(answer) <= len(choices):
        raise UsageError(f"{answer!r} is not one of the sessions listed (1 to {len(choices)})")
    return choices[int(answer) - 1].id


async def resolve_session(tether: Tether, wanted: str | None, *, cwd: str) -> str:
    """The stored session ``wanted`` names (its id or a unique prefix), or with
    ``wanted`` ``None`` the most recently active session whose cwd is ``cwd``.

    Raises:
        UsageError: none matches, or a prefix matches several.
    """
    from tether.persist.backends.errors import InvalidSessionIdError
    from tether.persist.service import PERSISTENCE

    persistence = tether.runtime.ctx.get(PERSISTENCE)
    if persistence is None:
        raise UsageError("there are no stored sessions to resume (no persistence row)")
    if wanted is not None:
        try:
            if await persistence.exists(wanted):
                return wanted
        except InvalidSessionIdError:
            raise UsageError(f"{wanted!r} is not a session id") from None
    summaries = await persistence.list()
    if wanted is None:
        for summary in summaries:
            if summary.cwd == cwd and summary.error is None:
                return summary.id
        raise UsageError(f"no stored session in {cwd} to continue")
    matches = [summary.id for summary in summaries if summary.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"no stored session {wanted!r} (see: tether sessions list)")
    shown = ", ".join(matches[:3]) + (", …" if len(matches) > 3 else "")
    raise UsageError(f"{wanted!r} matches {len(matches)} sessions ({shown}); give more of the id")
