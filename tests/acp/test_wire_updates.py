"""Updates are built as wire JSON; each kind is exactly what the SDK's models would send."""

import time
from typing import Any

from acp.schema import SessionNotification
from acp.utils import serialize_params

from tests.shown import builtin_shown
from tether.acp.replay import replay
from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.content import ImageRef, TextBlock, ToolCallBlock
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    ContextCompacted,
    RetryEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.log import Session, SessionHeader
from tether.tools.progress import ToolProgress


def _every_kind() -> Session:
    session = Session(SessionHeader(id="wire", created_at=time.time(), cwd="/"))
    calls = (
        ToolCallBlock("c1", "bash", {"command": "ls -l", "timeout": None}),
        ToolCallBlock("c2", "bash_output", {"task_id": "bash-1"}),
        ToolCallBlock("c3", "grep", {"pattern": "x"}),
        ToolCallBlock("c4", "read", {"path": "cat.png"}),
    )
    for payload in (
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        UserMessageEvent(
            id="u1",
            source="notice",
            content=(
                TextBlock("look"),
                ImageRef("data:image/jpeg;base64,AAAA"),
                ImageRef("https://example.com/a.png", "image/png"),
                ImageRef("https://example.com/b"),
            ),
        ),
        AssistantChunk(kind="reasoning", delta="thinking"),
        AssistantChunk(kind="text", delta="Hello"),
        RetryEvent(attempt=1, code="overloaded", error="529 overloaded", delay=0.0),
        AssistantChunk(kind="text", delta="Hello, world"),
        AssistantMessageEvent(content=(TextBlock("Hello, world"), *calls), finish="tool-calls"),
        *(ToolCallEvent(id=c.id, name=c.name, arguments=c.arguments) for c in calls),
        ToolResultEvent(id="c1", name="bash", content="total 0", is_error=False),
        ToolResultEvent(id="c2", name="bash_output", content="", is_error=False),
        ToolResultEvent(id="c3", name="grep", content="no such tool", is_error=True),
        ToolResultEvent(
            "c4", "read", "cat.png: an image", False, (ImageRef.inline("image/png", b"cat"),)
        ),
        StepEnd(turn=1, step=1),
        ContextCompacted(0, 16, "summary", "auto", "offline", 100),
        TurnEnd(turn=1, reason=Completed()),
    ):
        session.append(payload)
    return session


def _as_the_sdk_sends_it(update: SessionUpdate) -> dict[str, object]:
    notification = {"sessionId": "wire", "update": update}
    return serialize_params(SessionNotification.model_validate(notification))


def test_every_update_is_what_the_sdk_models_serialize() -> None:
    session = _every_kind()
    live = UpdateMapper(live=True)
    produced = [update for event in session.events for update in live.updates(event)]
    produced += list(replay(session.events))
    produced.append(live.started("c1"))
    running = ToolProgress(call_id="c1", name="bash", elapsed=2.5, tail=("a",))
    produced.append(live.progress(running))
    kinds = {str(update["sessionUpdate"]) for update in produced}
    assert kinds == {
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "session_info_update",
    }
    for update in produced:
        assert _as_the_sdk_sends_it(update) == {"sessionId": "wire", "update": update}


def test_an_image_a_tool_result_carries_is_shown_as_image_content_live_and_replayed() -> None:
    events = _every_kind().events
    live = UpdateMapper(live=True)
    shown_live = [u for e in events for u in live.updates(e) if u.get("toolCallId") == "1:c4"]
    shown_replayed = [u for u in replay(events) if u.get("toolCallId") == "1:c4"]
    assert shown_live == shown_replayed
    assert shown_live[-1]["content"] == [
        {"type": "content", "content": {"type": "text", "text": "cat.png: an image"}},
        {"type": "content", "content": {"type": "image", "data": "Y2F0", "mimeType": "image/png"}},
    ]


def test_the_replay_shows_the_answer_the_model_holds_and_no_retry_notice() -> None:
    texts = [
        update["content"]["text"]  # type: ignore[index]
        for update in replay(_every_kind().events)
        if update["sessionUpdate"] == "agent_message_chunk"
    ]
    assert texts == ["Hello, world"]


def test_a_live_session_is_told_of_a_compaction_and_a_replay_is_not() -> None:
    live = UpdateMapper(live=True)
    texts = [
        str(update["content"]["text"])  # type: ignore[index]
        for event in _every_kind().events
        for update in live.updates(event)
        if update["sessionUpdate"] == "agent_message_chunk"
    ]
    assert "\n(context compacted: events 0 to 16 summarized, " in texts[-1]


def test_a_frame_with_text_utf8_cannot_carry_is_still_written_as_json() -> None:
    import json

    from tether.acp.transport import encode_frame

    frame = {"jsonrpc": "2.0", "method": "session/update", "params": {"text": "a\ud800é"}}
    assert json.loads(encode_frame(frame)) == frame
    plain = {"jsonrpc": "2.0", "id": 1, "result": {"text": "é\u2028", "n": 1.5}}
    assert json.loads(encode_frame(plain)) == plain


def test_usage_plan_title_options_and_commands_are_what_the_sdk_models_serialize() -> None:
    from tether.acp.commands import available_commands
    from tether.acp.options import config_options
    from tether.acp.permissions import Mode
    from tether.acp.usage import UsageMeter
    from tether.llm.catalog import ModelCatalog, ModelEntry, Prices
    from tether.session.settings import ConfigChanged, PlanEntry, PlanUpdated

    catalog = ModelCatalog(
        {"m:a": ModelEntry(name="A", context_window=100, prices=Prices(input=1.0, output=2.0))}
    )
    session = Session(SessionHeader(id="wire", created_at=time.time(), cwd="/"))
    for payload in (
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        UserMessageEvent(id="u1", source="user", content=(TextBlock("  a   title "),)),
        AssistantMessageEvent(
            content=(TextBlock("hi"),),
            finish="stop",
            usage={"input_tokens": 30, "output_tokens": 5, "cached_input_tokens": 10},
        ),
        PlanUpdated(entries=(PlanEntry("do", "high", "in_progress"),)),
        StepEnd(turn=1, step=1),
        TurnEnd(turn=1, reason=Completed()),
        ConfigChanged(option="model", value="m:b"),
    ):
        session.append(payload)
    live = UpdateMapper(live=True, meter=UsageMeter(catalog, "m:a"))
    produced = [update for event in session.events for update in live.updates(event)]
    replayed = list(replay(session.events, UsageMeter(catalog, "m:a")))
    produced.append(available_commands(None, None))
    for option in config_options(catalog, configured="m:a", model="m:b", mode=Mode.ASK):
        produced.append({"sessionUpdate": "config_option_update", "configOptions": [option]})
    kinds = {str(update["sessionUpdate"]) for update in produced}
    assert {
        "usage_update",
        "plan",
        "session_info_update",
        "available_commands_update",
        "config_option_update",
    } <= kinds
    for update in [*produced, *replayed]:
        assert _as_the_sdk_sends_it(update) == {"sessionId": "wire", "update": update}
    usage = next(u for u in produced if u["sessionUpdate"] == "usage_update")
    assert usage == {
        "sessionUpdate": "usage_update",
        "used": 35,
        "size": 100,
        "cost": {"amount": 4e-05, "currency": "USD"},
    }
    info = next(u for u in produced if u["sessionUpdate"] == "session_info_update")
    assert info["title"] == "a title"
    # A replay shows the same usage, title and plan as the live stream did.
    assert [u for u in replayed if u["sessionUpdate"] != "user_message_chunk"] == [
        u for u in produced[: len(replayed) - 1]
    ]


def test_file_tool_updates_carry_kind_locations_and_diffs_as_the_sdk_models_do() -> None:
    from tether.tools.preview import Diff, Location, ToolPreview

    live = UpdateMapper(live=True, cwd="/ws", shown=builtin_shown)
    edit = ToolCallEvent(id="e1", name="edit", arguments={"path": "a.txt", "old_string": "a"})
    read = ToolCallEvent(id="r1", name="read", arguments={"path": "/abs/b.txt", "offset": 7})
    session = Session(SessionHeader(id="wire", created_at=time.time(), cwd="/ws"))
    session.append(TurnStart(turn=1))
    session.append(StepStart(turn=1, step=1))
    blocks = tuple(ToolCallBlock(c.id, c.name, c.arguments) for c in (edit, read))
    session.append(AssistantMessageEvent(content=blocks, finish="tool-calls"))

    def _event(payload: object) -> Any:
        return session.append(payload)  # type: ignore[arg-type]

    (call,) = live.updates(_event(edit))
    assert call["kind"] == "edit" and call["locations"] == [{"path": "/ws/a.txt"}]
    preview = ToolPreview(
        kind="edit",
        title="edit a.txt",
        locations=(Location("/ws/a.txt", 3),),
        diffs=(Diff("/ws/a.txt", "a\n", "b\n"), Diff("/ws/new.txt", None, "new\n")),
    )
    shown = live.previewed("e1", preview)
    assert shown["locations"] == [{"path": "/ws/a.txt", "line": 3}]
    assert shown["content"] == [
        {"type": "diff", "path": "/ws/a.txt", "oldText": "a\n", "newText": "b\n"},
        {"type": "diff", "path": "/ws/new.txt", "newText": "new\n"},
    ]
    (done,) = live.updates(
        _event(ToolResultEvent(id="e1", name="edit", content="edited", is_error=False))
    )
    assert [c["type"] for c in done["content"]] == ["diff", "diff", "content"]  # type: ignore[union-attr, index]
    (read_call,) = live.updates(_event(read))
    assert read_call["kind"] == "read"
    assert read_call["locations"] == [{"path": "/abs/b.txt", "line": 7}]
    for update in (call, shown, done, read_call):
        assert _as_the_sdk_sends_it(update) == {"sessionId": "wire", "update": update}
    pending = live.pending("e1", "edit", edit.arguments, preview)
    assert pending.kind == "edit" and pending.content is not None and len(pending.content) == 2


def test_a_replayed_preview_is_the_live_one_and_a_shortened_diff_says_so() -> None:
    from tether.acp.updates import stored_preview
    from tether.session import ToolPreviewed
    from tether.session.previews import PreviewDiff
    from tether.tools.preview import Diff, Location, ToolPreview

    session = Session(SessionHeader(id="wire", created_at=time.time(), cwd="/ws"))
    block = ToolCallBlock("e1", "edit", {"path": "a.txt"})
    preview = ToolPreview(
        "edit", "edit a.txt", (Location("/ws/a.txt", 2),), (Diff("/ws/a.txt", "a\n", "b\n"),)
    )
    for payload in (
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        AssistantMessageEvent(content=(block,), finish="tool-calls"),
        ToolCallEvent(id="e1", name="edit", arguments=block.arguments),
        stored_preview("e1", preview),
    ):
        session.append(payload)
    live = UpdateMapper(live=True)
    assert [u for e in session.events for u in live.updates(e)][-1]["sessionUpdate"] == "tool_call"
    *_, replayed = replay(session.events)
    assert replayed == UpdateMapper(live=True, turn=1).previewed("e1", preview)

    shortened = ToolPreviewed(
        "e1", "edit", "edit big.txt", diffs=(PreviewDiff("/ws/big.txt", "x\n", "y\n", 40, "cut"),)
    )
    mapper = UpdateMapper(live=False, turn=1)
    shown = mapper.updates(session.append(shortened))
    assert shown[0]["content"] == [
        {"type": "diff", "path": "/ws/big.txt", "oldText": "x\n", "newText": "y\n"},
        {"type": "content", "content": {"type": "text", "text": "[cut]"}},
    ]
    (failed,) = mapper.updates(session.append(ToolResultEvent("e1", "edit", "", is_error=True)))
    assert "content" not in failed  # a failed edit changed nothing: diff and note go
    too_big = PreviewDiff("/ws/gen.txt", None, "", 1, "too big")
    (alone,) = mapper.updates(
        session.append(ToolPreviewed("e1", "edit", "write", diffs=(too_big,)))
    )
    assert alone["content"] == [
        {"type": "content", "content": {"type": "text", "text": "[too big]"}}
    ]
    for update in (replayed, *shown, alone):
        assert _as_the_sdk_sends_it(update) == {"sessionId": "wire", "update": update}


def _schema_problems(update: SessionUpdate) -> list[str]:
    import json
    from pathlib import Path

    from jsonschema import Draft202012Validator

    schema = Path(__file__).resolve().parents[2] / "schemas" / "acp" / "schema.unstable.json"
    defs = json.loads(schema.read_text())["$defs"]
    validator = Draft202012Validator({"$defs": defs, "$ref": "#/$defs/SessionUpdate"})
    return [error.message for error in validator.iter_errors(update)]


def test_a_client_that_takes_notices_and_compactions_gets_them_and_no_such_lines() -> None:
    events = _every_kind().events
    live = UpdateMapper(live=True, notices=True, compaction=True)
    produced = [update for event in events for update in live.updates(event)]
    notices = [u for u in produced if u["sessionUpdate"] == "notice"]
    assert notices == [
        {
            "sessionUpdate": "notice",
            "severity": "warning",
            "title": "Retrying",
            "description": "[retrying: 529 overloaded, attempt 2]",
        }
    ]
    (compaction,) = [u for u in produced if u["sessionUpdate"] == "compaction_update"]
    assert compaction == {
        "sessionUpdate": "compaction_update",
        "compactionId": f"compaction-{len(events) - 2}",
        "status": "completed",
        "summary": [{"type": "text", "text": "summary"}],
    }
    texts = "".join(
        str(u["content"]["text"])  # type: ignore[index]
        for u in produced
        if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert "retrying" not in texts and "compacted" not in texts
    assert [u for u in replay(events, compaction=True) if u in [*notices, compaction]] == [
        compaction
    ]
    for update in produced:
        assert _schema_problems(update) == []
    only_notices = UpdateMapper(live=True, notices=True)
    titles = [
        u["title"]
        for e in events
        for u in only_notices.updates(e)
        if u["sessionUpdate"] == "notice"
    ]
    assert titles == ["Retrying", "Context compacted"]


def test_the_chunks_of_a_message_share_its_id_and_a_retry_starts_another() -> None:
    events = _every_kind().events
    live = UpdateMapper(live=True)
    shown = [
        (str(u["sessionUpdate"]), u.get("messageId"))
        for e in events
        for u in live.updates(e)
        if str(u["sessionUpdate"]).startswith("agent_")
    ]
    first = [e.seq for e in events if isinstance(e.payload, AssistantChunk)]
    (compacted,) = [e.seq for e in events if isinstance(e.payload, ContextCompacted)]
    assert shown == [
        ("agent_thought_chunk", f"agent-{first[0]}"),
        ("agent_message_chunk", f"agent-{first[1]}"),
        ("agent_message_chunk", f"agent-{first[1] + 1}"),  # the retry's line
        ("agent_message_chunk", f"agent-{first[2]}"),
        ("agent_message_chunk", f"agent-{compacted}"),  # the compaction's line
    ]
    replayed = [
        u.get("messageId") for u in replay(events) if u["sessionUpdate"] == "agent_message_chunk"
    ]
    assert replayed == [f"agent-{first[2]}"]


def test_a_sandbox_denial_is_a_notice_to_a_client_that_shows_them() -> None:
    from tether.shell.sandbox import denial_note, refused_note

    record = "sandbox workspace-write, network off"
    denied = denial_note(record, "touch: /etc/x: Permission denied")
    refused = refused_note(record, ("example.com",))
    assert denied is not None and refused is not None
    output = f"touch: /etc/x: Permission denied\n[exit code: 1]\n{denied}\n{refused}"
    mimicked = f"{denied}\n[exit code: 0]"  # the command printed a note's words itself
    session = Session(SessionHeader(id="wire", created_at=time.time(), cwd="/"))
    for payload in (
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        AssistantMessageEvent(
            content=(
                ToolCallBlock("c1", "bash", {"command": "touch /etc/x"}),
                ToolCallBlock("c2", "bash", {"command": "cat notes"}),
            ),
            finish="tool-calls",
        ),
        ToolCallEvent(id="c1", name="bash", arguments={"command": "touch /etc/x"}),
        ToolResultEvent(id="c1", name="bash", content=output, is_error=False),
        ToolCallEvent(id="c2", name="bash", arguments={"command": "cat notes"}),
        ToolResultEvent(id="c2", name="bash", content=mimicked, is_error=False),
    ):
        session.append(payload)

    def notices(mapper: UpdateMapper) -> list[SessionUpdate]:
        shown = [u for e in session.events for u in mapper.updates(e)]
        return [u for u in shown if u["sessionUpdate"] == "notice"]

    shown = notices(UpdateMapper(live=True, notices=True))
    assert [u["description"] for u in shown] == [denied[1:-1], refused[1:-1]]
    assert {u["title"] for u in shown} == {"The sandbox denied an access"}
    assert all(_schema_problems(u) == [] for u in shown)
    assert notices(UpdateMapper(live=True)) == []
    assert notices(UpdateMapper(live=False, notices=True)) == []
