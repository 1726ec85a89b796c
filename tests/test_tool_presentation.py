"""Tools declare how their calls are shown, and every front end renders from that declaration.

A tool that is not built in (``patch_notes`` below) declares a presentation
no tool name could guess; ACP, the terminal and the web app all show its
calls as it says. The front ends' sources hold no decision by tool name.
"""

from __future__ import annotations

import ast
import io
import re
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.shown import BUILTIN
from tether import Tether
from tether.acp.updates import UpdateMapper
from tether.cli.asking import describe
from tether.cli.render import call_line, transcript
from tether.cli.surface import PlainSurface
from tether.cli.work import WorkView
from tether.content import ToolCallBlock
from tether.runtime.schema import Schema
from tether.runtime.signal import CancelSignal
from tether.session import (
    AssistantMessageEvent,
    Event,
    EventPayload,
    Session,
    SessionHeader,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnStart,
)
from tether.tools import DEFAULT_SHOWN, Change, Tool, ToolExec, ToolInvocation, ToolShown
from tether.tools.registry import TOOLS, shown_in
from tether.web.app import EncodedLogs

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"


class PatchArgs(Schema, frozen=True):
    """A change to a notes file."""

    file: str
    before: str
    after: str
    line: int | None = None


PATCH_SHOWN = ToolShown(
    kind="edit",
    title="{tool} {file}",
    paths=("file",),
    line="line",
    hidden=("before", "after"),
    change=Change(new="after", old="before"),
)


async def _patch(args: PatchArgs, exec: ToolExec) -> str:
    return "patched"


PATCH = Tool(
    name="patch_notes",
    description="Patch a notes file.",
    args=PatchArgs,
    execute=_patch,
    shown=PATCH_SHOWN,
)
ARGUMENTS: dict[str, object] = {
    "file": "notes.md",
    "before": "old words",
    "after": "new words",
    "line": 4,
}


def shown(name: str) -> ToolShown:
    return PATCH_SHOWN if name == PATCH.name else DEFAULT_SHOWN


def _session() -> tuple[Session, Event]:
    session = Session(SessionHeader(id="shown", created_at=time.time(), cwd="/ws"))
    call = ToolCallEvent(id="c1", name=PATCH.name, arguments=ARGUMENTS)
    payloads: tuple[EventPayload, ...] = (
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        AssistantMessageEvent(
            content=(ToolCallBlock("c1", PATCH.name, ARGUMENTS),), finish="tool-calls"
        ),
    )
    for payload in payloads:
        session.append(payload)
    return session, session.append(call)


# -- every built-in tool declares its presentation -------------------------------------


async def test_every_built_in_tool_declares_how_it_is_shown(tmp_path: Path) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        registry = tether.runtime.ctx.get(TOOLS)
        assert registry is not None
        tools = {tool.name: tool for tool in registry.list()}
        lookup = shown_in(registry)
        assert set(tools) == set(BUILTIN)
        for name, tool in tools.items():
            assert tool.shown is not DEFAULT_SHOWN, f"{name} declares no presentation"
            assert lookup(name) is tool.shown == BUILTIN[name]
        assert lookup("an_mcp_tool") is DEFAULT_SHOWN


def test_a_presentation_naming_an_argument_the_tool_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'path'.*its arguments do not have"):
        Tool(
            name="patch_notes",
            description="",
            args=PatchArgs,
            execute=_patch,
            shown=ToolShown(paths=("path",)),
        )
    with pytest.raises(ValueError, match="kind"):
        ToolShown(kind="paint")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plain named fields"):
        ToolShown(title="{0}")


def test_a_title_without_its_argument_is_the_tools_name_and_changes_read_each_form() -> None:
    assert PATCH_SHOWN.title_of("patch_notes", {"before": "x"}) == "patch_notes"
    edit = BUILTIN["edit"]
    many = {"path": "a", "edits": [{"old_string": "1", "new_string": "2"}, {"old_string": "3"}]}
    assert edit.changes(many) == [("1", "2"), ("3", "")]
    assert BUILTIN["write"].changes({"path": "a", "content": "all"}) == [(None, "all")]
    assert DEFAULT_SHOWN.changes(ARGUMENTS) == []


# -- ACP ----------------------------------------------------------------------------------


def test_acp_titles_kinds_and_locates_a_call_as_its_tool_declares() -> None:
    _, call = _session()
    (update,) = UpdateMapper(live=True, turn=1, cwd="/ws", shown=shown).updates(call)
    assert update["title"] == "patch_notes notes.md"
    assert update["kind"] == "edit"
    assert update["locations"] == [{"path": "/ws/notes.md", "line": 4}]
    (plain,) = UpdateMapper(live=True, turn=1, cwd="/ws").updates(call)
    assert (plain["title"], plain["kind"], "locations" in plain) == ("patch_notes", "other", False)


# -- the terminal -------------------------------------------------------------------------


def test_the_terminal_hides_what_the_tool_shows_as_a_change_and_shows_the_diff() -> None:
    session, call = _session()
    out, err = io.StringIO(), io.StringIO()
    view = WorkView(PlainSurface(out, err), shown=shown)
    view(session, call)
    lines = err.getvalue().splitlines()
    assert lines[0] == '→ patch_notes notes.md {"line": 4}'
    assert "  -old words" in lines and "  +new words" in lines
    printed = list(transcript(session, shown=shown))
    assert '  → patch_notes notes.md {"line": 4}' in printed
    everything = call_line(PATCH.name, ARGUMENTS)
    assert "old words" in everything  # declared nothing: every argument is shown


def test_ask_mode_shows_a_change_as_a_diff_never_as_arguments() -> None:
    signal = CancelSignal()
    exec = ToolExec(agent=None, call_id="c1", signal=signal, cwd="/ws")
    invocation = ToolInvocation(tool_name=PATCH.name, args=ARGUMENTS, exec=exec)
    question = describe(invocation, None, PATCH_SHOWN)
    assert question.splitlines()[1] == '[ask] patch_notes notes.md {"line": 4}'
    assert "-old words" in question and "+new words" in question
    assert "/ws/notes.md" in question and '"after"' not in question


# -- the web app --------------------------------------------------------------------------


def test_the_web_stream_carries_the_presentation_with_each_call_and_result() -> None:
    session, call = _session()
    result = session.append(ToolResultEvent(id="c1", name=PATCH.name, content="ok", is_error=False))
    message = EncodedLogs().message("shown", [call, result], shown)
    records = msgspec.json.decode(message.split(b"data: ", 1)[1])
    declared = msgspec.json.decode(msgspec.json.encode(PATCH_SHOWN))
    assert [r.get("shown") for r in records] == [declared, declared]
    assert declared["change"] == {"new": "after", "old": "before"}


# -- no front end decides by a tool's name -----------------------------------------------

_NAMED = re.compile(r"(name|tool)", re.IGNORECASE)
_CONST = re.compile(r"^[A-Z_]*TOOL$")


def _decisions_by_name(path: Path) -> list[str]:
    """Comparisons of a name-like value with a built-in tool's name, and collections of
    two or more built-in tool names (a table by tool name)."""
    found: list[str] = []
    tree = ast.parse(path.read_text())
    # ``Literal["read", "edit", ...]`` is a type listing a protocol's values (ACP's
    # tool kinds), not a table keyed by tool name.
    literals = {
        id(node.slice)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal"
    }
    for node in ast.walk(tree):
        if id(node) in literals:
            continue
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            # A tool's name as a literal, or as a plugin's constant for it (``TASK_TOOL``).
            named = any(
                (isinstance(side, ast.Constant) and side.value in BUILTIN)
                or (isinstance(side, ast.Name) and _CONST.search(side.id) is not None)
                for side in sides
            )
            subjects = [ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)]
            if named and any(_NAMED.search(s) for s in subjects):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        keys: list[Any] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            keys = list(node.elts)
        tools = [k.value for k in keys if isinstance(k, ast.Constant) and k.value in BUILTIN]
        if len(tools) >= 2:
            found.append(f"{path.name}:{node.lineno} a table of {tools}")
    return found


def test_no_front_end_decides_by_a_tools_name() -> None:
    found = [
        hit
        for front in ("acp", "web", "cli")
        for path in sorted((SRC / front).rglob("*.py"))
        for hit in _decisions_by_name(path)
    ]
    names = "|".join(map(re.escape, BUILTIN))
    by_name = re.compile(rf"(name|tool)\s*===?\s*\"({names})\"|\.name\.startsWith\(")
    for path in sorted((SRC / "web" / "static").glob("*.js")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if by_name.search(line):
                found.append(f"{path.name}:{number} {line.strip()}")
    assert found == []
