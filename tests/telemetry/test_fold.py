"""The fold from events to spans: a function of the log alone.

No receiver here: these pin what the spans are (ids, parents, times, the
GenAI attributes) whatever process folds the log, however its writes were
batched, and from whichever mark an exporter resumes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.session.builders import (
    answer,
    call,
    complete_turn,
    new_session,
    open_step,
    started,
    user,
)
from tether.session import (
    Aborted,
    AssistantMessageEvent,
    Session,
    StepEnd,
    Stopped,
    ToolResultEvent,
    ToolStopped,
    TurnEnd,
)
from tether.session.repair import repair
from tether.session.vocabulary import TextBlock
from tether.telemetry.export import SessionTrace
from tether.telemetry.spans import FOLDED_TYPES, SpanRecord, TraceFold, TraceParent


def two_turns() -> Session:
    session = new_session()
    complete_turn(session, "first")
    complete_turn(session, "second")
    return session


def whole(session: Session, **options: object) -> list[SpanRecord]:
    """Every span of ``session``, folded at once."""
    model = options.pop("model", "deepseek:deepseek-chat")
    fold = TraceFold(session.id, str(model), **options)  # type: ignore[arg-type]
    return list(fold.fold_all(session.events))


def test_each_turn_is_a_trace_of_an_agent_span_over_its_model_and_tool_calls() -> None:
    spans = whole(two_turns())
    names = [span.name for span in spans]
    assert (
        names
        == [
            "chat deepseek-chat",
            "execute_tool bash",
            "chat deepseek-chat",
            "invoke_agent tether",
        ]
        * 2
    )
    first = spans[:4]
    turn = first[-1]
    assert turn.parent_id is None
    assert {span.trace_id for span in first} == {turn.trace_id}
    assert {span.parent_id for span in first[:-1]} == {turn.span_id}
    assert spans[4].trace_id != turn.trace_id
    assert turn.attributes["gen_ai.provider.name"] == "deepseek"
    assert first[1].attributes["gen_ai.tool.call.id"] == "c1"
    assert all(span.start <= span.end for span in spans)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), max_size=6))
def test_spans_do_not_depend_on_how_the_writes_were_batched(cuts: list[int]) -> None:
    session = two_turns()
    expected = whole(session)
    fold = TraceFold(session.id, "deepseek:deepseek-chat")
    got: list[SpanRecord] = []
    for cut in [*sorted(set(cuts)), len(session.events)]:
        stop = min(cut, len(session.events))
        events = session.events.of_types(FOLDED_TYPES, fold.next_seq, stop)
        got.extend(fold.fold_through(events, stop))
    assert got == expected


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=-1, max_value=30))
def test_a_trace_resumed_from_its_mark_sends_exactly_the_spans_after_it(mark: int) -> None:
    session = two_turns()
    everything = whole(session, model="offline")
    resumed = SessionTrace.of(session, None, sent_through=mark)
    again = resumed.take(session.events)
    assert again == [span for span in everything if span.end_seq > mark]


def test_a_turn_a_crash_left_open_is_traced_once_repaired() -> None:
    session = new_session()
    complete_turn(session)
    open_step(session)
    block = call("c9")
    session.append(answer(block))
    session.append(started(block))
    before = whole(session)
    assert [span.name for span in before][-1] == "chat deepseek-chat"  # the rest is open
    repair(session)
    after = whole(session)
    assert after[: len(before)] == before
    tool, turn = after[-2], after[-1]
    assert tool.name == "execute_tool bash" and tool.error == "tool_error"
    assert tool.attributes["tether.tool.outcome"] == "error"
    assert turn.attributes["tether.turn.end_reason"] == "interrupted"
    assert turn.error == "interrupted"
    assert [event.name for event in turn.events] == ["tether.session.recovered"]


def test_a_cancel_receipt_is_an_event_on_its_turn() -> None:
    session = new_session()
    turn, _step = open_step(session)
    block = call("c1")
    session.append(answer(block))
    session.append(started(block))
    stopped = Stopped("call", "c1", 42, ("SIGTERM",), None, "SIGTERM", 0.01)
    session.append(ToolStopped(turn, "user", (stopped,)))
    session.append(ToolResultEvent("c1", "bash", "stopped", is_error=True))
    session.append(StepEnd(turn, 1))
    session.append(TurnEnd(turn, Aborted("user")))
    (*_, agent) = whole(session)
    assert [event.name for event in agent.events] == [
        "tether.tool.stopped",
        "tether.turn.cancelled",
    ]
    assert agent.events[0].attributes["tether.stop.calls"] == ("c1",)
    assert agent.attributes["tether.turn.cancel_cause"] == "user"


def test_usage_and_cost_are_on_the_model_call_and_content_only_when_asked() -> None:
    session = new_session()
    turn, step = open_step(session)
    from tether.session import StepEnd, TurnEnd
    from tether.session.vocabulary import Completed

    session.append(user("u1", "what is the key sk-abcdefghijklmnopqrstuvwx"))
    usage = {"input_tokens": 1000, "output_tokens": 10}
    session.append(AssistantMessageEvent((TextBlock("none"),), "stop", usage=usage))
    session.append(StepEnd(turn, step))
    session.append(TurnEnd(turn, Completed()))

    def price(model: str, used: object) -> tuple[float, str]:
        assert model == "deepseek:deepseek-chat"
        return 0.25, "USD"

    chat, turn = whole(session, pricing=price)
    assert turn.attributes["gen_ai.usage.input_tokens"] == 1000
    assert turn.attributes["tether.cost"] == 0.25
    assert chat.attributes["gen_ai.usage.input_tokens"] == 1000
    assert chat.attributes["gen_ai.usage.output_tokens"] == 10
    assert chat.attributes["tether.cost"] == 0.25
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert "gen_ai.input.messages" not in chat.attributes
    shown = whole(session, content=True)[0].attributes["gen_ai.input.messages"]
    assert isinstance(shown, str) and "***" in shown and "sk-abc" not in shown


def test_a_child_sessions_turns_hang_under_the_delegating_call() -> None:
    parent = TraceParent(trace_id=7, span_id=9)
    spans = whole(two_turns(), parent=parent)
    turns = [span for span in spans if span.name.startswith("invoke_agent")]
    assert {(span.trace_id, span.parent_id) for span in turns} == {(7, 9)}
    assert {span.trace_id for span in spans} == {7}
