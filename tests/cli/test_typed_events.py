"""The terminal reads events by their typed payloads: what it shows of each, and its sources.

The work view and the transcript match ``event.payload`` against the
session's structs (``TurnEnd``, ``ToolStopped`` …); no module of ``cli/``
compares an event's type with a string or reads its data by key.
"""

from __future__ import annotations

import ast
import io
import time
from pathlib import Path

from tests.shown import builtin_shown
from tether.cli.render import transcript
from tether.cli.surface import PlainSurface
from tether.cli.work import WorkView
from tether.content import TextBlock, ToolCallBlock
from tether.front.outcomes import turn_outcome
from tether.session import (
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Blocked,
    Completed,
    Errored,
    EventPayload,
    MaxTokens,
    Session,
    SessionHeader,
    StepEnd,
    StepStart,
    Stopped,
    StoppedAgent,
    ToolCallEvent,
    ToolResultEvent,
    ToolStopped,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)

CLI = Path(__file__).resolve().parents[2] / "src" / "tether" / "cli"

RECEIPT = ToolStopped(
    turn=1,
    cause="user",
    stopped=(Stopped("call", "c1", 4242, ("SIGTERM", "SIGKILL"), None, "SIGKILL", 0.25),),
    agents=(StoppedAgent("child-1", "c2", "aborted", "parent", 0.5),),
)


def _turn(*payloads: EventPayload, end: TurnEnd) -> Session:
    session = Session(SessionHeader(id="typed", created_at=time.time(), cwd="/ws"))
    prompt = UserMessageEvent(id="u1", source="user", content=(TextBlock("go"),))
    opening = (TurnStart(turn=1), StepStart(turn=1, step=1), prompt)
    for payload in (*opening, *payloads, StepEnd(turn=1, step=1), end):
        session.append(payload)
    return session


def _shown_work(session: Session, **options: object) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    view = WorkView(PlainSurface(out, err), shown=builtin_shown, **options)  # type: ignore[arg-type]
    for event in session.events:
        view(session, event)
    return out.getvalue(), err.getvalue()


def test_the_work_view_shows_each_typed_event_and_sums_the_turns_usage() -> None:
    call = ToolCallBlock("c1", "bash", {"command": "sleep 9", "timeout": 5})
    session = _turn(
        AssistantChunk(kind="reasoning", delta="hmm"),
        AssistantChunk(kind="text", delta="Running it."),
        AssistantMessageEvent(
            content=(TextBlock("Running it."), call),
            finish="tool-calls",
            usage={"input_tokens": 1200, "output_tokens": 30},
        ),
        ToolCallEvent(id="c1", name="bash", arguments=call.arguments),
        ToolResultEvent(id="c1", name="bash", content="a\nb", is_error=True),
        RECEIPT,
        end=TurnEnd(turn=1, reason=Aborted(cause="user")),
    )
    out, err = _shown_work(session)
    assert out.startswith("Running it.") and "hmm" not in out + err
    lines = err.splitlines()
    assert '→ bash sleep 9 {"timeout": 5}' in lines
    assert "← bash failed (2 lines) #1" in lines
    assert (
        "■ stopped call c1: process group 4242, sent SIGTERM, then SIGKILL, "
        "ended by SIGKILL in 250 ms"
    ) in lines
    assert "■ stopped child agent child-1: its turn ended aborted (parent) in 500 ms" in lines
    assert "(turn stopped: cancelled by user)" in lines
    assert "tokens: 1,200 in, 30 out" in lines


def test_a_write_call_is_shown_with_the_lines_it_writes_from_its_declared_change() -> None:
    arguments = {"path": "notes.txt", "content": "one\ntwo\n"}
    call = ToolCallBlock("w1", "write", arguments)
    session = _turn(
        AssistantMessageEvent(content=(call,), finish="tool-calls"),
        ToolCallEvent(id="w1", name="write", arguments=arguments),
        ToolResultEvent(id="w1", name="write", content="wrote", is_error=False),
        end=TurnEnd(turn=1, reason=Completed()),
    )
    _, err = _shown_work(session)
    assert "→ write notes.txt" in err.splitlines()
    assert "  +one" in err and "  +two" in err and '"content"' not in err


def test_every_way_a_turn_ends_reads_from_its_typed_reason() -> None:
    assert turn_outcome(Completed()) is None
    assert turn_outcome(Aborted(cause="user")) == "cancelled by user"
    assert turn_outcome(Blocked()) == "refused: a hook or the provider would not let the turn go on"
    assert turn_outcome(MaxTokens()) == "turn ended: max-tokens"
    failed = turn_outcome(Errored(error="boom", code="auth"))
    assert failed is not None and failed.startswith("error: ")
    session = _turn(end=TurnEnd(turn=1, reason=Errored(error="boom")))
    _, err = _shown_work(session)
    assert err.splitlines()[-1].startswith("error: ")


def test_the_transcript_and_the_replay_show_a_stored_log_from_its_typed_events() -> None:
    call = ToolCallBlock("c1", "read", {"path": "a.py", "offset": 3})
    session = _turn(
        AssistantMessageEvent(content=(TextBlock("Reading."), call), finish="tool-calls"),
        ToolCallEvent(id="c1", name="read", arguments=call.arguments),
        ToolResultEvent(id="c1", name="read", content="x = 1", is_error=False),
        RECEIPT,
        end=TurnEnd(turn=1, reason=Completed()),
    )
    lines = list(transcript(session, shown=builtin_shown))
    assert lines[1:] == [
        "",
        "── turn 1 ──",
        "you: go",
        "assistant: Reading.",
        '  → read a.py {"offset": 3}',
        "  ← read result:",
        "    x = 1",
        "  ■ stopped call c1: process group 4242, sent SIGTERM, then SIGKILL, "
        "ended by SIGKILL in 250 ms",
        "  ■ stopped child agent child-1: its turn ended aborted (parent) in 500 ms",
    ]
    out, err = io.StringIO(), io.StringIO()
    WorkView(PlainSurface(out, err), shown=builtin_shown).replay(session)
    shown_out, shown_err = out.getvalue(), err.getvalue()
    assert "> go" in shown_err and "Reading." in shown_out
    assert "← read done (1 line) #1" in shown_err


def _string_type_checks_and_data_reads(path: Path) -> list[str]:
    """Comparisons of an event's ``type`` with a string, and reads of ``data`` by key."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            typed = any(isinstance(s, ast.Attribute) and s.attr == "type" for s in sides)
            literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
            if typed and literal:
                found.append(f"{where} {ast.unparse(node)}")
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("data"):
            found.append(f"{where} {ast.unparse(node)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and ast.unparse(node.func.value).endswith("data")
        ):
            found.append(f"{where} {ast.unparse(node)}")
    return found


def test_no_cli_module_checks_an_event_type_by_string_or_reads_its_data_by_key() -> None:
    found = [
        hit for path in sorted(CLI.glob("*.py")) for hit in _string_type_checks_and_data_reads(path)
    ]
    assert found == []
