"""Context windows by model, size estimates, the incremental history and the cut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.session.builders import answer, complete_turn, new_session, open_step, user
from tether.content import TextBlock, UserRoleMessage
from tether.loop.compaction import plan_cut, transcript
from tether.loop.context import FALLBACK_WINDOW, context_window, message_tokens
from tether.loop.history import History
from tether.session import ContextCompacted, StepEnd, derive_messages
from tether.session.settings import HistoryCleared


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("anthropic:claude-sonnet-4-5", 200_000),
        ("anthropic", 200_000),
        ("deepseek:deepseek-chat", 128_000),
        ("openai:gpt-4.1-mini", 1_047_576),
        ("openai:gpt-4o", 128_000),
        ("openai-compatible:llama3.1:8b", 131_072),
        ("openai-compatible:anthropic/claude-sonnet-4.5", 200_000),  # a router's name
        ("openai-compatible:something-new", FALLBACK_WINDOW),
    ],
)
def test_common_models_have_a_known_window(model: str, window: int) -> None:
    assert context_window(model) == window


def test_configured_windows_win_by_reference_then_by_model_name() -> None:
    overrides = {"openai-compatible:qwen3:8b": 8_192, "gpt-4o": 64_000}
    assert context_window("openai-compatible:qwen3:8b", overrides) == 8_192
    assert context_window("openai:gpt-4o", overrides) == 64_000
    assert context_window("openai:gpt-4.1", overrides) == 1_047_576


def test_the_estimate_grows_with_the_text() -> None:
    short = message_tokens(UserRoleMessage((TextBlock("hi"),)))
    long = message_tokens(UserRoleMessage((TextBlock("x" * 4_000),)))
    assert long - short >= 999


def test_the_history_equals_derive_messages_across_a_compaction() -> None:
    session = new_session()
    history = History(session)
    complete_turn(session, "one")
    assert history.messages() == tuple(derive_messages(session))
    complete_turn(session, "two")
    last = [e.seq for e in session.events if e.type == "step/end"][1]
    session.append(ContextCompacted(0, last, "sum", "manual", "offline", 10))
    assert history.messages() == tuple(derive_messages(session))
    complete_turn(session, "three")
    assert history.messages() == tuple(derive_messages(session))
    assert history.tokens() == sum(message_tokens(m) for m in derive_messages(session))


def test_a_compaction_keeps_the_messages_it_leaves_as_they_were_held() -> None:
    # The history is folded, never derived again: what stays is not held twice.
    session = new_session()
    history = History(session)
    for prompt in ("one", "two", "three"):
        complete_turn(session, prompt)
    before = history.messages()
    first_end = next(e.seq for e in session.events if e.type == "step/end")
    session.append(ContextCompacted(0, first_end, "sum", "manual", "offline", 10))
    after = history.messages()
    assert after == tuple(derive_messages(session))
    kept = [m for m in before if any(m is n for n in after)]
    assert len(kept) == len(after) - 1  # all but the summary
    assert history.tokens() == sum(message_tokens(m) for m in after)


def test_a_clear_drops_the_history_and_later_messages_are_folded_after_it() -> None:
    session = new_session()
    history = History(session)
    complete_turn(session, "one")
    history.messages()
    session.append(HistoryCleared())
    assert history.messages() == ()
    assert history.tokens() == 0
    complete_turn(session, "two")
    assert history.messages() == tuple(derive_messages(session))
    assert history.tokens() == sum(message_tokens(m) for m in derive_messages(session))


def test_a_cut_planned_from_the_history_names_its_messages() -> None:
    session = new_session()
    history = History(session)
    for prompt in ("a" * 400, "b" * 400, "c" * 400):
        complete_turn(session, prompt)
    cut = plan_cut(session, 150, history.conversation())
    assert cut == plan_cut(session, 150)
    assert cut is not None
    assert all(m is n for m, n in zip(cut.head, history.messages(), strict=False))


def test_the_providers_count_corrects_a_low_estimate() -> None:
    session = new_session()
    history = History(session)
    complete_turn(session, "one")
    history.messages()
    estimate = history.tokens()
    history.note_usage(estimate + 5_000)
    assert history.tokens() == estimate + 5_000
    complete_turn(session, "two")
    history.messages()
    assert history.tokens() > estimate + 5_000


def test_the_cut_keeps_recent_messages_within_the_budget_and_ends_at_a_step() -> None:
    session = new_session()
    for prompt in ("a" * 400, "b" * 400, "c" * 400):
        complete_turn(session, prompt)
    ends = [e.seq for e in session.events if e.type == "step/end"]

    def tail(end: int) -> int:
        return sum(message_tokens(m) for m in derive_messages(session.events[end + 1 :]))

    budget = 150  # about one turn
    cut = plan_cut(session, budget)
    assert cut is not None
    assert cut.first_seq == 0
    assert session.events[cut.last_seq].type == StepEnd.type
    assert tail(cut.last_seq) <= budget
    earlier = ends[ends.index(cut.last_seq) - 1]
    assert tail(earlier) > budget
    assert cut.head == tuple(derive_messages(session.events[: cut.last_seq + 1]))


def test_the_step_being_run_is_never_summarized() -> None:
    session = new_session()
    complete_turn(session, "done")
    open_step(session)
    session.append(user("u9", "x" * 10_000))
    session.append(answer(text="thinking"))
    cut = plan_cut(session, 0)
    assert cut is not None
    assert cut.last_seq == max(e.seq for e in session.events if e.type == "step/end")
    assert all("x" * 100 not in str(message) for message in cut.head)


def test_there_is_nothing_to_compact_without_a_closed_step_or_anything_new() -> None:
    session = new_session()
    assert plan_cut(session, 0) is None
    open_step(session)
    session.append(user("u1", "hi"))
    assert plan_cut(session, 0) is None

    done = new_session()
    complete_turn(done, "one")
    last = max(e.seq for e in done.events if e.type == "step/end")
    done.append(ContextCompacted(0, last, "sum", "manual", "offline", 10))
    assert plan_cut(done, 0) is None


def test_the_transcript_shortens_long_tool_output_first_then_drops_the_oldest() -> None:
    session = new_session()
    complete_turn(session, "please look")
    messages = tuple(derive_messages(session))
    text = transcript(messages, 10_000)
    assert "[user]\nplease look" in text
    assert "(calls bash" in text
    assert "[bash result]\ndone" in text

    huge = (UserRoleMessage((TextBlock("start " + "y" * 50_000),)),)
    cut = transcript(huge, 2_000)
    assert len(cut) < 2_200
    assert cut.startswith("[The earliest part of the conversation is left out")


@given(st.lists(st.sampled_from(["turn", "compact", "derive"]), max_size=25))
@settings(max_examples=60, deadline=None)
def test_the_incremental_history_always_equals_a_full_derive(operations: list[str]) -> None:
    session = new_session()
    history = History(session)
    for operation in operations:
        if operation == "turn":
            complete_turn(session, f"prompt {len(session.events)}")
        elif operation == "compact":
            ends = [e.seq for e in session.events if e.type == "step/end"]
            if ends:
                last = ends[len(ends) // 2]
                session.append(ContextCompacted(0, last, f"sum {last}", "auto", "m", 1))
        assert history.messages() == tuple(derive_messages(session))
        assert history.tokens() == sum(message_tokens(m) for m in derive_messages(session))
