"""Entry point of the ``tether`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from tether import __version__
from tether.cli.boot import UsageError, existing_dir
from tether.cli.failures import EXIT_FAILED, OneLineFormatter, StartRefusedError, describe
from tether.cli.process import begin_startup, exit_now
from tether.fence import fence
from tether.masking import CredentialFilter

if TYPE_CHECKING:
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    """What ``add_subparsers`` returns: each command adds its parser to it."""


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """``--model`` and ``--base-url``: the model choice (see docs/models.md)."""
    parser.add_argument("--model", metavar="M", help="PROVIDER:MODEL, e.g. deepseek:deepseek-chat")
    parser.add_argument(
        "--base-url", metavar="URL", help="the provider's URL, up to its API version"
    )


def add_thinking_option(parser: argparse.ArgumentParser) -> None:
    """``--show-thinking``: show the model's reasoning as it streams."""
    parser.add_argument(
        "--show-thinking",
        action="store_true",
        help="show the model's reasoning as it streams (chat: /thinking toggles it)",
    )


def add_sandbox_option(parser: argparse.ArgumentParser) -> None:
    """``--sandbox MODE``: what the agent's commands may touch (see docs/security.md)."""
    parser.add_argument(
        "--sandbox",
        choices=("read-only", "workspace-write", "full-access"),
        default=None,
        help="confine the agent's commands and file tools: read-only, workspace-write "
        "(the workspace and a private temp dir; no network), or full-access "
        "(default: the sandbox setting, else workspace-write)",
    )


def add_rule_options(parser: argparse.ArgumentParser) -> None:
    """``--allow``/``--ask``/``--deny RULE``: permission rules added to the configured
    ones for this run (see docs/security.md)."""
    for name, says in (
        ("allow", "run calls RULE matches without asking"),
        ("ask", "ask about calls RULE matches, whatever the mode"),
        ("deny", "never run calls RULE matches (deny wins)"),
    ):
        parser.add_argument(
            f"--{name}",
            action="append",
            dest=f"{name}_rules",
            default=[],
            metavar="RULE",
            help=f"{says}; e.g. 'Bash(git status:*)', 'Edit(docs/**)' (repeatable)",
        )


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_amount(text: str) -> float:
    """An argparse type: a finite amount more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an amount: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """``--max-budget-usd`` and the other limits of the spend budget (see docs/budget.md)."""
    for flag, kind, what in (
        ("--max-budget-usd", positive_amount, "US dollars the session may spend"),
        ("--max-turn-usd", positive_amount, "US dollars one turn may spend"),
        ("--max-day-usd", positive_amount, "US dollars this host's sessions may spend a day"),
        ("--max-budget-tokens", positive_int, "tokens the session may spend"),
        ("--max-turn-tokens", positive_int, "tokens one turn may spend"),
        ("--max-day-tokens", positive_int, "tokens this host's sessions may spend a day"),
        (
            "--max-cluster-day-usd",
            positive_amount,
            "US dollars the sessions of all hosts of the PostgreSQL database may spend a day",
        ),
        (
            "--max-cluster-day-tokens",
            positive_int,
            "tokens the sessions of all hosts of the PostgreSQL database may spend a day",
        ),
    ):
        parser.add_argument(
            flag,
            type=kind,
            metavar="N",
            help=f"{what} (child agents included); a request that would pass it is not sent",
        )


def add_resume_options(parser: argparse.ArgumentParser) -> None:
    """``--resume ID`` and ``--continue``: which stored session to go on with."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--resume",
        metavar="ID",
        nargs="?",
        const="",
        help="continue a stored session (its id, or a unique prefix); without ID, pick one "
        "of the directory's recent sessions",
    )
    which.add_argument(
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the most recently active session of the working directory",
    )


def add_acp_parser(commands: _Commands) -> None:
    """``tether acp`` and its options."""
    acp = commands.add_parser(
        "acp",
        help=_HELP["acp"],
        description="Serve one ACP client (an editor) on stdin/stdout until stdin closes. "
        "stdout carries protocol frames only; logs go to stderr.",
    )
    add_model_options(acp)
    add_budget_options(acp)
    add_sandbox_option(acp)
    add_rule_options(acp)
    acp.add_argument(
        "--mode",
        choices=("ask", "auto"),
        default="ask",
        help="permission mode of new sessions: ask before every tool call, or not (default: ask)",
    )
    acp.add_argument(
        "--images", action="store_true", help="accept images in prompts (for models that read them)"
    )
    acp.add_argument(
        "--title-model",
        metavar="MODEL",
        default=None,
        help="a model that names each session after its first prompt (default: the prompt does)",
    )
    acp.add_argument(
        "--permission-timeout",
        type=_positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="a permission question the editor leaves unanswered this long is a rejection "
        "(default: 600)",
    )
    acp.add_argument(
        "--terminal",
        choices=("local", "client"),
        default="local",
        help="where foreground bash commands run: locally, or in the editor's terminals when "
        "it offers them (default: local)",
    )


def add_web_parser(commands: _Commands) -> None:
    """``tether web`` and its options."""
    web = commands.add_parser(
        "web",
        help=_HELP["web"],
        description="Serve the web app and its API (docs/web.md). Prints the URL to open, "
        "with its access token, on stdout.",
    )
    add_model_options(web)
    add_budget_options(web)
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1; any other is warned about)",
    )
    web.add_argument(
        "--port", type=int, default=0, metavar="N", help="the port (default: one the OS picks)"
    )
    web.add_argument(
        "--mode",
        choices=("ask", "auto"),
        default="ask",
        help="permission mode of sessions that name none (default: ask)",
    )
    web.add_argument(
        "--permission-timeout",
        type=_positive_seconds,
        default=600.0,
        metavar="SECONDS",
        help="a permission question left unanswered this long is a rejection (default: 600)",
    )
    web.add_argument(
        "--acp-grace",
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="an ACP client (/acp) gone this long without reconnecting is disconnected, "
        "its sessions closed (default: 60)",
    )
    add_rule_options(web)


def add_sessions_parser(commands: _Commands) -> None:
    """The ``sessions`` command and its actions."""
    sessions = commands.add_parser("sessions", help=_HELP["sessions"])
    session_commands = sessions.add_subparsers(dest="sessions_command", metavar="ACTION")
    session_commands.required = True
    listing = session_commands.add_parser(
        "list", help="stored sessions, most recently active first"
    )
    listing.add_argument(
        "--cwd", type=Path, metavar="DIR", help="only sessions whose working directory is DIR"
    )
    listing.add_argument(
        "--search", metavar="TEXT", help="only sessions whose title or prompts hold TEXT"
    )
    listing.add_argument("--limit", type=positive_int, metavar="N", help="at most N sessions")
    runs = listing.add_mutually_exclusive_group()
    runs.add_argument(
        "--queued", action="store_true", help="submitted runs no worker took yet (PostgreSQL)"
    )
    runs.add_argument(
        "--running", action="store_true", help="submitted runs a worker is running (PostgreSQL)"
    )
    show = session_commands.add_parser("show", help="a readable transcript")
    show.add_argument("id")
    show.add_argument("--thinking", action="store_true", help="include the model's reasoning")
    imported = session_commands.add_parser(
        "import", help="store a session from a file `sessions export` wrote (JSONL)"
    )
    imported.add_argument("file", type=Path)
    export = session_commands.add_parser("export", help="the log as JSONL or Markdown")
    export.add_argument("id")
    export.add_argument("--format", choices=("jsonl", "md"), default="jsonl")
    delete = session_commands.add_parser("delete", help="delete a stored session")
    delete.add_argument("id")
    tail = session_commands.add_parser(
        "tail", help="print a session's events as JSON lines, then each new one as it is stored"
    )
    tail.add_argument("id")
    tail.add_argument(
        "--after",
        type=int,
        default=-1,
        metavar="SEQ",
        help="start after this seq (default: from the first event)",
    )
    trace = session_commands.add_parser(
        "trace",
        help="send a stored session's trace (and its delegated sessions') over OTLP/HTTP",
    )
    trace.add_argument("id")
    trace.add_argument(
        "--endpoint",
        metavar="URL",
        help="the OTLP/HTTP base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT, "
        "else http://127.0.0.1:4318)",
    )
    trace.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long one export may take, retries included (default: 10)",
    )
    trace.add_argument(
        "--content",
        action="store_true",
        help="include prompts, answers, tool arguments and results (secrets masked)",
    )
    add_rewind_parsers(session_commands)
    cancel = session_commands.add_parser(
        "cancel", help="cancel the work of a session live on any host (PostgreSQL)"
    )
    cancel.add_argument("id")
    cancel.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the request is sent, without waiting for the stop in the log",
    )


def add_submit_parser(commands: _Commands) -> None:
    """``tether submit`` and its options."""
    submit = commands.add_parser(
        "submit",
        help=_HELP["submit"],
        description="Store a run request in the PostgreSQL queue and print the session id "
        "it will run as, at once; `tether worker` on any host runs it (docs/deploy.md).",
    )
    submit.add_argument("task", nargs="+", help="what to do")
    submit.add_argument("--cwd", type=existing_dir, metavar="DIR", help="working directory")
    submit.add_argument("--model", metavar="M", help="PROVIDER:MODEL (default: the worker's)")
    submit.add_argument("--queue", default="default", metavar="NAME", help="default: default")
    submit.add_argument(
        "--priority", type=int, default=0, metavar="N", help="higher runs first (default: 0)"
    )
    submit.add_argument(
        "--max-attempts",
        type=positive_int,
        default=3,
        metavar="N",
        help="park the run after N takes that never settled (default: 3)",
    )


def add_worker_parser(commands: _Commands) -> None:
    """``tether worker`` and its options."""
    worker = commands.add_parser(
        "worker",
        help=_HELP["worker"],
        description="Take submitted runs from the PostgreSQL queue and run each as a "
        "session; SIGTERM or Ctrl-C: take no more and exit once the current ones end.",
    )
    worker.add_argument(
        "--concurrency", type=positive_int, default=1, metavar="N", help="runs at once"
    )
    worker.add_argument("--queue", metavar="NAME", help="only this queue's runs (default: all)")
    worker.add_argument(
        "--limit-queue",
        action="append",
        default=[],
        metavar="NAME=N",
        help="let at most N runs of queue NAME run at once on all workers (stored; "
        "repeatable; N=0 removes the limit)",
    )
    worker.add_argument("--model", metavar="M", help="for runs submitted without one")
    worker.add_argument(
        "--drain-on-sigterm",
        action="store_true",
        help="SIGTERM drains: hand the runs under way to other workers (docs/deploy.md)",
    )
    _add_grace(worker)


def _add_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="when draining, how long turns under way may run before they are handed off "
        "(default: 30)",
    )


def add_drain_parser(commands: _Commands) -> None:
    """``tether drain`` and its options."""
    drain = commands.add_parser(
        "drain",
        help=_HELP["drain"],
        description="Ask the workers of HOST (a host id, or HOST:PID) to hand their live "
        "runs to other workers and exit; wait until the host has no live session.",
    )
    drain.add_argument("host", metavar="HOST", help="the host id (TETHER_HOST_ID) to drain")
    _add_grace(drain)
    drain.add_argument("--no-wait", action="store_true", help="return once the request is sent")


def add_rewind_parsers(session_commands: _Commands) -> None:
    """``sessions rewind`` and ``sessions diff`` (docs/rewind.md)."""
    rewind = session_commands.add_parser(
        "rewind",
        help="take the workspace and/or the conversation back to the start of a turn",
        description="Restore the files to the snapshot taken as turn TURN started (--code), "
        "branch the conversation before it into a new session (--conversation), or both "
        "(the default). The log is never cut: the session keeps every event.",
    )
    rewind.add_argument("id")
    rewind.add_argument("--to", type=positive_int, required=True, metavar="TURN")
    what = rewind.add_mutually_exclusive_group()
    for choice in ("code", "conversation", "both"):
        what.add_argument(f"--{choice}", dest="what", action="store_const", const=choice)
    rewind.add_argument(
        "--force",
        action="store_true",
        help="overwrite files changed outside the agent since that turn started",
    )
    diff = session_commands.add_parser(
        "diff", help="what changed in the workspace since a turn started (a unified diff)"
    )
    diff.add_argument("id")
    diff.add_argument(
        "--turn",
        type=positive_int,
        metavar="N",
        help="since turn N started (default: the first turn with a snapshot)",
    )


def add_fork_option(parser: argparse.ArgumentParser) -> None:
    """``--fork ID[@TURN]``: start on a branch of a stored session."""
    parser.add_argument(
        "--fork",
        metavar="ID[@TURN]",
        help="go on in a new session branched from a stored one: before turn TURN, or "
        "after its last event (the stored session keeps every event)",
    )


def add_run_parser(commands: _Commands) -> None:
    """``tether run`` and its options."""
    run = commands.add_parser(
        "run",
        help=_HELP["run"],
        description="Run one task. The answer goes to stdout (streamed on a terminal; "
        "written once stored when stdout is a pipe or a file); tool activity and the "
        "session id go to stderr. Ctrl-C cancels the turn; a second Ctrl-C exits at once.",
    )
    run.add_argument(
        "task",
        nargs="?",
        help="what to do (quote it); - or nothing reads it from stdin when stdin is not a terminal",
    )
    add_model_options(run)
    add_budget_options(run)
    add_resume_options(run)
    add_sandbox_option(run)
    add_rule_options(run)

    add_fork_option(run)
    run.add_argument(
        "--mode",
        choices=("ask", "auto"),
        default="auto",
        help="ask on the terminal before each tool call, or not (default: auto)",
    )
    run.add_argument(
        "--output-format",
        choices=("text", "json", "stream-json"),
        default="text",
        help="text (the answer); json (one result object, once stored); "
        "stream-json (every event as a JSON line, then the result) — see docs/cli.md",
    )
    run.add_argument(
        "--stream",
        action="store_true",
        help="stream the answer to stdout as it arrives even when stdout is not a terminal "
        "(the printed answer then comes before it is stored)",
    )
    run.add_argument("--cwd", type=existing_dir, metavar="DIR", help="working directory")
    add_thinking_option(run)


def add_chat_parser(commands: _Commands) -> None:
    """``tether chat`` and its options."""
    chat = commands.add_parser(
        "chat",
        help=_HELP["chat"],
        description="Chat with an agent. Lines are prompts (queued while a turn runs; "
        "Ctrl-S steers it); /help lists the commands and keys. Ctrl-C cancels the "
        "running turn; /quit or Ctrl-D leaves.",
    )
    add_model_options(chat)
    add_budget_options(chat)
    add_resume_options(chat)
    add_sandbox_option(chat)
    add_rule_options(chat)

    add_fork_option(chat)
    chat.add_argument(
        "--mode",
        choices=("ask", "auto"),
        default="auto",
        help="ask before each tool call (y / n / always), or not (default: auto)",
    )
    add_thinking_option(chat)


def add_config_parser(commands: _Commands) -> None:
    """``tether config`` and its actions."""
    config = commands.add_parser("config", help=_HELP["config"])
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION")
    config_commands.required = True
    config_show = config_commands.add_parser(
        "show", help="the composed plugin rows with their effective config"
    )
    add_model_options(config_show)
    config_commands.add_parser("path", help="where the user config and the sessions live")
    init = config_commands.add_parser(
        "init", help="write a commented user config ($TETHER_HOME/tether.yml)"
    )
    init.add_argument("--force", action="store_true", help="replace an existing one")


def add_doctor_parser(commands: _Commands) -> None:
    """``tether doctor`` and its options."""
    doctor = commands.add_parser(
        "doctor",
        help=_HELP["doctor"],
        description="Check that sessions can be stored and that the model answers: one "
        "request of a few tokens, with its latency. Exit 0 when every check passed.",
    )
    add_model_options(doctor)


def add_auth_parser(commands: _Commands) -> None:
    """``tether auth`` and its actions (see :mod:`tether.cli.auth`)."""
    auth = commands.add_parser(
        "auth",
        help=_HELP["auth"],
        description="API keys stored here are used when the provider's variable is unset.",
    )
    actions = auth.add_subparsers(dest="auth_command", metavar="ACTION")
    actions.required = True
    for name, text in (
        ("login", "ask for a provider's API key on the terminal (not echoed) and store it"),
        ("logout", "remove a provider's stored API key"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "provider",
            nargs="?",
            metavar="PROVIDER",
            help="deepseek, openai or anthropic (default: the provider of the model "
            "tether would use)",
        )
    actions.add_parser("status", help="where each provider's key comes from (never the key)")


def add_mcp_parser(commands: _Commands) -> None:
    """``tether mcp`` and its actions (see :mod:`tether.cli.mcp_command`)."""
    from tether.cli.mcp_command import add_mcp_parser as build

    build(commands, _HELP["mcp"])


def add_demo_parser(commands: _Commands) -> None:
    """``tether demo``."""
    commands.add_parser("demo", help=_HELP["demo"])


_HELP = {
    "run": "run one task headless, the answer on stdout",
    "chat": "an interactive session in the terminal",
    "sessions": "list, show, export, tail, rewind, cancel or delete sessions",
    "submit": "queue a run for a worker (PostgreSQL); prints its session id",
    "worker": "take queued runs and run them as sessions (PostgreSQL)",
    "drain": "hand a host's live runs to other workers (PostgreSQL)",
    "config": "inspect the composition",
    "doctor": "check the data directory and the model (one tiny request)",
    "acp": "serve an editor over the Agent Client Protocol on stdio",
    "web": "watch, steer and stop sessions in a browser",
    "demo": "tour the plugin runtime",
    "auth": "store, remove or show the model providers' API keys",
    "mcp": "list, add, remove or test the configured MCP servers",
}
"""Each command's line in ``tether --help``, in the order listed there."""

_BUILDERS: dict[str, Callable[[_Commands], None]] = {
    "run": add_run_parser,
    "chat": add_chat_parser,
    "sessions": add_sessions_parser,
    "submit": add_submit_parser,
    "worker": add_worker_parser,
    "drain": add_drain_parser,
    "config": add_config_parser,
    "doctor": add_doctor_parser,
    "acp": add_acp_parser,
    "web": add_web_parser,
    "demo": add_demo_parser,
    "auth": add_auth_parser,
    "mcp": add_mcp_parser,
}

_GLOBAL_FLAGS = frozenset({"-v", "--verbose", "--dev"})
_GLOBAL_VALUED = frozenset({"--data-dir", "--config"})


def with_default_command(argv: Sequence[str]) -> list[str]:
    """``argv``, with ``chat`` added when it holds global options only (or
    nothing): a bare ``tether`` opens the chat, as other harnesses do."""
    at = 0
    while at < len(argv):
        word = argv[at]
        if word in _GLOBAL_FLAGS or word.split("=", 1)[0] in _GLOBAL_VALUED:
            at += 1 if word in _GLOBAL_FLAGS or "=" in word else 2
        else:
            return list(argv)
    if at > len(argv):  # an option's value is missing: argparse says so
        return list(argv)
    return [*argv, "chat"]


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when it is certain without parsing; else ``None``.

    Only the global options are skipped: an abbreviated or unknown option
    (whose value argparse alone knows how to take) makes it uncertain.
    """
    at = 0
    while at < len(argv):
        word = argv[at]
        if word in _GLOBAL_FLAGS:
            at += 1
        elif word in _GLOBAL_VALUED:
            at += 2
        elif word.split("=", 1)[0] in _GLOBAL_VALUED:
            at += 1
        elif word.startswith("-"):
            return None
        else:
            return word if word in _BUILDERS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``tether`` argument parser.

    With ``command``, only that command's parser is built with its options;
    every other command gets a parser that has only its help line (what
    ``tether --help`` shows), which saves building a dozen parsers on each
    start. Parse with it only command lines that name ``command``
    (:func:`command_of` says which); without ``command``, every parser is
    complete.
    """
    parser = argparse.ArgumentParser(
        prog="tether",
        description="tether: an agent harness with owned lifecycles and durable sessions.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="where sessions and the user overlay live (default: $TETHER_HOME, "
        "else ~/.local/share/tether)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        action="append",
        metavar="FILE",
        help="a composition overlay that patches plugin rows by id (repeatable)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="reload plugin modules when their source files change",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, build in _BUILDERS.items():
        if command is None or name == command:
            build(commands)
        else:
            commands.add_parser(name, help=_HELP[name])
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _composing_failed(exc: Exception) -> bool:
    """Whether ``exc`` is a :class:`~tether.runtime.errors.CompositionError`: looked up
    only once the runtime was imported (only composing raises it), so that start-up
    does not import the runtime before the command needs it."""
    errors = sys.modules.get("tether.runtime.errors")
    return errors is not None and isinstance(exc, errors.CompositionError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    words = with_default_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(words))
    args = parse(parser, words)
    handler = logging.StreamHandler(sys.stderr)
    # Without --verbose a person sees tether's own one-line messages (warnings
    # and errors, "tether: …" like every other line tether writes); with it,
    # every record in full, tether's debug lines among them.
    handler.setFormatter(
        logging.Formatter("%(levelname)s %(name)s: %(message)s")
        if args.verbose
        else OneLineFormatter("tether: %(message)s")
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[handler]
    )
    for installed in logging.getLogger().handlers:
        installed.addFilter(CredentialFilter())
    try:
        return dispatch(parser, args)
    except UsageError as exc:
        # One line: argparse prints its usage banner for what it parses
        # itself; a bad value found later (an unknown session, a model
        # setting) is named without it.
        print(f"tether: error: {exc}", file=sys.stderr)
        return 2
    except StartRefusedError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if _composing_failed(exc):
            # A configuration file that cannot be read, parsed or composed: one
            # line naming the file (and where in it), before anything started.
            print(f"tether: error: {exc}", file=sys.stderr)
            return 2
        reason = describe(exc)
        if reason is None:
            raise
        print(f"tether: {reason}", file=sys.stderr)
        return EXIT_FAILED


def parse(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.Namespace:
    """``words`` parsed; an argument no parser knows is refused by the parser of
    its command, whose usage banner is the one that helps (exit 2)."""
    args, unknown = parser.parse_known_args(words)
    if unknown:
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` chose: ``tether sessions list``'s for
    ``sessions list``."""
    while True:
        chosen = None
        for action in parser._actions:  # argparse keeps its subparsers only there
            if isinstance(action, argparse._SubParsersAction) and action.dest:
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
        if chosen is None:
            return parser
        parser = chosen


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import asyncio

    if args.command == "run":
        from tether.cli.run import run

        return asyncio.run(run(args))
    if args.command == "chat":
        import signal

        # Until the chat's own handler takes over: Ctrl-C never leaves the chat.
        signal.signal(signal.SIGINT, lambda _signum, _frame: None)
        from tether.cli.chat import chat

        return asyncio.run(chat(args))
    if args.command == "sessions":
        from tether.cli.sessions import sessions

        return asyncio.run(sessions(args))
    if args.command == "drain":
        from tether.cli.drain import drain

        return asyncio.run(drain(args))
    if args.command in ("submit", "worker"):
        from tether.cli import worker

        return asyncio.run(worker.submit(args) if args.command == "submit" else worker.worker(args))
    if args.command == "config":
        if args.config_command == "path":
            from tether.cli.config_files import config_path

            return config_path(args)
        if args.config_command == "init":
            from tether.cli.config_files import config_init

            return config_init(args)
        from tether.cli.config_show import config_show

        return config_show(args)
    if args.command == "doctor":
        from tether.cli.doctor import doctor

        return asyncio.run(doctor(args))
    if args.command == "acp":
        from tether.cli.acp import run_acp

        run_acp(args)
    if args.command == "web":
        from tether.cli.web import run_web

        run_web(args)
    if args.command == "auth":
        from tether.cli.auth import auth

        return auth(args)
    if args.command == "mcp":
        from tether.cli.mcp_command import mcp_command

        return mcp_command(args)
    if args.command == "demo":
        from tether.cli.demo import run_demo

        asyncio.run(run_demo())
        return 0
    parser.print_help(sys.stderr)
    return 2


def entry() -> NoReturn:
    """The ``tether`` console script: :func:`main`, then a prompt exit.

    Secrets are fenced first (:func:`~tether.fence.fence`: a re-exec when the
    environment holds any; the console script has done it already, through
    :mod:`tether.cli.launch`). The garbage collector is paused for start-up
    (see :mod:`tether.cli.process`).
    Every command has stopped tether (logs flushed, processes killed) when
    :func:`main` returns, so the interpreter's slow teardown is skipped.
    """
    fence()
    begin_startup()
    exit_now(main())


if __name__ == "__main__":
    entry()
