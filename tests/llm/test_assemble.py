"""Folding a stream of chunks into an assistant message (tether.llm.assemble)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.llm import (
    Assembler,
    AssistantMessage,
    Finish,
    ReasoningBlock,
    ReasoningDelta,
    RedactedReasoning,
    RedactedReasoningBlock,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
    assemble,
)
from tether.llm.assemble import MISSING_FINISH


def test_consecutive_text_deltas_fold_into_one_text_block() -> None:
    result = assemble([TextDelta("Hel"), TextDelta(""), TextDelta("lo"), Finish("stop")])
    assert result.message == AssistantMessage((TextBlock("Hello"),))
    assert result.text == "Hello"
    assert result.finish == Finish("stop")


def test_reasoning_folds_into_one_block_and_keeps_the_last_signature() -> None:
    result = assemble(
        [
            ReasoningDelta("think "),
            ReasoningDelta("hard", signature="sig-1"),
            TextDelta("answer"),
            Finish("stop"),
        ]
    )
    assert result.message.content == (ReasoningBlock("think hard", "sig-1"), TextBlock("answer"))
    assert result.text == "answer"


def test_a_block_of_another_kind_in_between_starts_a_new_block() -> None:
    result = assemble(
        [
            TextDelta("a"),
            ReasoningDelta("r"),
            TextDelta("b"),
            ToolCallDelta(0, "c0", "bash", "{}"),
            TextDelta("c"),
            Finish("tool-calls"),
        ]
    )
    assert result.message.content == (
        TextBlock("a"),
        ReasoningBlock("r"),
        TextBlock("b"),
        ToolCallBlock("c0", "bash", {}),
        TextBlock("c"),
    )
    assert result.text == "abc"


def test_each_signed_reasoning_block_and_each_redacted_one_keeps_its_own_place() -> None:
    result = assemble(
        [
            RedactedReasoning("opaque-1"),
            ReasoningDelta("first"),
            ReasoningDelta("", signature="sig-1"),
            ReasoningDelta("second"),
            ReasoningDelta("", signature="sig-2"),
            RedactedReasoning("opaque-2"),
            TextDelta("answer"),
            Finish("stop"),
        ]
    )
    assert result.message.content == (
        RedactedReasoningBlock("opaque-1"),
        ReasoningBlock("first", "sig-1"),
        ReasoningBlock("second", "sig-2"),
        RedactedReasoningBlock("opaque-2"),
        TextBlock("answer"),
    )


def test_tool_call_deltas_fold_by_index_in_order_of_first_appearance() -> None:
    result = assemble(
        [
            ToolCallDelta(1, "c1", "read", '{"pa'),
            ToolCallDelta(0, "c0", "bash", '{"command":'),
            ToolCallDelta(1, None, None, 'th": "a.txt"}'),
            ToolCallDelta(0, None, None, ' "ls"}'),
            Finish("tool-calls"),
        ]
    )
    assert result.message.tool_calls == (
        ToolCallBlock("c1", "read", {"path": "a.txt"}),
        ToolCallBlock("c0", "bash", {"command": "ls"}),
    )
    assert result.message.tool_calls[0].arguments == {"path": "a.txt"}
    assert result.message.tool_calls[1].arguments == {"command": "ls"}
    assert result.invalid_calls == {}


def test_a_call_with_no_argument_text_has_empty_arguments() -> None:
    result = assemble([ToolCallDelta(0, "c0", "now", ""), Finish("tool-calls")])
    assert result.message.tool_calls[0].arguments == {}
    assert result.invalid_calls == {}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"command": "ls"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not an array"),
        ('"ls"', "must be a JSON object, not a string"),
        ("null", "must be a JSON object, not null"),
    ],
)
def test_invalid_tool_arguments_are_reported_not_raised(raw: str, reason: str) -> None:
    result = assemble(
        [
            ToolCallDelta(0, "c0", "bash", raw[:3]),
            ToolCallDelta(0, None, None, raw[3:]),
            ToolCallDelta(1, "c1", "bash", '{"command": "pwd"}'),
            Finish("tool-calls"),
        ]
    )
    bad, good = result.message.tool_calls
    assert bad == ToolCallBlock("c0", "bash", {})
    assert bad.arguments == {}
    assert good.arguments == {"command": "pwd"}
    assert set(result.invalid_calls) == {"c0"}
    invalid = result.invalid_calls["c0"]
    assert invalid.raw_arguments == raw
    assert invalid.name == "bash"
    assert reason in invalid.reason


def test_a_call_without_a_name_is_reported_invalid() -> None:
    result = assemble([ToolCallDelta(0, "c0", None, "{}"), Finish("tool-calls")])
    assert result.message.tool_calls == (ToolCallBlock("c0", "", {}),)
    assert result.invalid_calls["c0"].reason == "the model sent no tool name"


def test_truncated_arguments_at_max_tokens_keep_the_call_with_a_marker() -> None:
    result = assemble([ToolCallDelta(0, "c0", "bash", '{"comm'), Finish("max-tokens")])
    assert result.message.interrupted is False
    assert result.message.tool_calls == (ToolCallBlock("c0", "bash", {}),)
    assert "c0" in result.invalid_calls


def test_partial_keeps_streamed_text_as_interrupted_and_drops_incomplete_calls() -> None:
    assembler = Assembler()
    chunks: list[StreamChunk] = [
        ReasoningDelta("plan"),
        TextDelta("Running "),
        TextDelta("two"),
        ToolCallDelta(0, "c0", "bash", '{"command": "ls"}'),
        ToolCallDelta(1, "c1", "bash", '{"command": "pw'),
        ToolCallDelta(2, "c2", None, "{}"),
    ]
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.partial() == AssistantMessage(
        (
            ReasoningBlock("plan"),
            TextBlock("Running two"),
            ToolCallBlock("c0", "bash", {"command": "ls"}),
        ),
        interrupted=True,
    )


def test_partial_of_an_empty_stream_is_an_empty_interrupted_message() -> None:
    assert Assembler().partial() == AssistantMessage((), interrupted=True)


def test_a_stream_without_finish_is_an_error_finish() -> None:
    result = assemble([TextDelta("cut")])
    assert result.finish == Finish("error", error=MISSING_FINISH)
    assert result.message == AssistantMessage((TextBlock("cut"),), interrupted=True)


@pytest.mark.parametrize("reason", ["aborted", "error"])
def test_an_aborted_or_failed_stream_yields_the_partial_message(reason: str) -> None:
    chunks: list[StreamChunk] = [
        TextDelta("so far"),
        ToolCallDelta(0, "c0", "bash", '{"comm'),
        Finish(reason),  # type: ignore[arg-type]
    ]
    result = assemble(chunks)
    assert result.message == AssistantMessage((TextBlock("so far"),), interrupted=True)
    assert result.text == "so far"
    assert result.invalid_calls == {}


def test_the_last_usage_wins() -> None:
    result = assemble([Usage(10, 0), TextDelta("x"), Usage(10, 3, cached_tokens=4), Finish("stop")])
    assert result.usage == Usage(10, 3, cached_tokens=4)
    assert assemble([Finish("stop")]).usage is None


def test_feeding_after_the_finish_fails_loudly() -> None:
    assembler = Assembler()
    assembler.feed(Finish("stop"))
    assert assembler.finished
    with pytest.raises(ValueError, match="after the stream finished"):
        assembler.feed(TextDelta("late"))


def test_feeding_a_non_chunk_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a stream chunk"):
        Assembler().feed("text")  # type: ignore[arg-type]


def test_invalid_calls_cannot_be_mutated() -> None:
    result = assemble([ToolCallDelta(0, "c0", "bash", "["), Finish("tool-calls")])
    with pytest.raises(TypeError):
        result.invalid_calls["c1"] = result.invalid_calls["c0"]  # type: ignore[index]


def test_results_are_values_hashed_without_their_mappings() -> None:
    chunks: list[StreamChunk] = [ToolCallDelta(0, "c0", "bash", "["), Finish("tool-calls")]
    result, again = assemble(chunks), assemble(chunks)
    assert result.invalid_calls
    assert result == again
    assert hash(result) == hash(again)
    with pytest.raises(AttributeError):
        result.text = "changed"  # type: ignore[misc]


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(
    text=st.text(min_size=1),
    arguments=st.dictionaries(st.text(max_size=5), json_values, max_size=4),
    text_cuts=st.lists(st.integers(min_value=0, max_value=200)),
    arg_cuts=st.lists(st.integers(min_value=0, max_value=200)),
)
def test_however_a_stream_is_split_the_result_is_the_same(
    text: str,
    arguments: dict[str, object],
    text_cuts: list[int],
    arg_cuts: list[int],
) -> None:
    raw = json.dumps(arguments)
    pieces = _split(raw, arg_cuts)
    chunks: list[StreamChunk] = [TextDelta(piece) for piece in _split(text, text_cuts)]
    chunks.append(ToolCallDelta(0, "c0", "tool", pieces[0]))
    chunks.extend(ToolCallDelta(0, None, None, piece) for piece in pieces[1:])
    chunks.append(Finish("tool-calls"))
    result = assemble(chunks)
    assert result.message == AssistantMessage(
        (TextBlock(text), ToolCallBlock("c0", "tool", arguments))
    )
    assert result.text == text
