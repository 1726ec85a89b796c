"""A child's progress as its parent's ``task`` call shows it: text, call lines, a bound."""

import time

from acp.schema import SessionNotification
from acp.utils import serialize_params

from tests.shown import builtin_shown
from tether.acp.delegation import PROGRESS_LIMIT, ChildProgress, call_summary
from tether.session import AssistantChunk, Event, EventPayload, ToolCallEvent, ToolResultEvent


class _Child:
    """Events of a child's log, one after another."""

    def __init__(self) -> None:
        self.seq = 0

    def append(self, payload: EventPayload) -> Event:
        self.seq += 1
        return Event.from_payload(payload, seq=self.seq, time=time.time())


def _child() -> _Child:
    return _Child()


def test_text_streams_as_it_is_and_each_tool_call_gets_a_line_of_its_own() -> None:
    session, progress = _child(), ChildProgress(builtin_shown)
    shown = []
    for payload in (
        AssistantChunk(kind="reasoning", delta="hidden thoughts"),
        AssistantChunk(kind="text", delta="Let me "),
        AssistantChunk(kind="text", delta="look"),
        ToolCallEvent(id="c1", name="bash", arguments={"command": "ls  -l\nwc"}),
        ToolResultEvent(id="c1", name="bash", content="total 0", is_error=False),
        ToolCallEvent(id="c2", name="grep", arguments={"pattern": "x", "path": "src"}),
        ToolCallEvent(id="c3", name="task", arguments={"description": "dig", "prompt": "…"}),
        AssistantChunk(kind="text", delta="Done."),
    ):
        shown.append(progress.advance(session.append(payload)))
    assert shown == [False, True, True, True, False, True, True, True]
    assert progress.text == ("Let me look\n▸ bash: ls -l wc\n▸ grep: src\n▸ task: dig\nDone.")


def test_a_long_progress_keeps_its_last_characters_and_says_it_was_cut() -> None:
    session, progress = _child(), ChildProgress(builtin_shown)
    for index in range(3 * PROGRESS_LIMIT // 100):
        progress.advance(session.append(AssistantChunk(kind="text", delta=f"{index:099d}\n")))
    text = progress.text
    assert len(text) == PROGRESS_LIMIT and text.startswith("…")
    assert text.endswith(f"{3 * PROGRESS_LIMIT // 100 - 1:099d}\n")


def test_the_progress_update_is_what_the_sdk_models_serialize() -> None:
    session, progress = _child(), ChildProgress(builtin_shown)
    progress.advance(session.append(AssistantChunk(kind="text", delta="working")))
    update = progress.update("1:c1")
    notification = {"sessionId": "parent", "update": update}
    assert serialize_params(SessionNotification.model_validate(notification)) == notification


def test_a_call_summary_names_what_the_call_is_about_and_stays_one_short_line() -> None:
    def summary(tool: str, arguments: dict[str, object]) -> str:
        return call_summary(tool, arguments, builtin_shown(tool))

    assert summary("read", {"path": "a.py"}) == "read: a.py"
    assert summary("todo", {"items": []}) == "todo"
    long = summary("bash", {"command": "echo " + "x" * 300})
    assert len(long) == 120 and long.endswith("…")
