"""The usage meter: the context's size after each answer, and after a compaction."""

from __future__ import annotations

from tether.llm.catalog import ModelCatalog, ModelEntry, Prices
from tether.llm.metering import UsageMeter
from tether.session import AssistantMessageEvent, Event, EventPayload
from tether.session.compaction import ContextCompacted


def fold(meter: UsageMeter, *payloads: EventPayload) -> None:
    for seq, payload in enumerate(payloads):
        meter.advance(Event.from_payload(payload, seq=seq, time=1.0))


def answer(input_tokens: int) -> AssistantMessageEvent:
    usage = {"input_tokens": input_tokens, "output_tokens": 1_000}
    return AssistantMessageEvent(content=(), finish="stop", usage=usage)


def test_after_a_compaction_the_context_is_not_reported_at_its_old_size() -> None:
    entry = ModelEntry(prices=Prices(input=1.0, output=2.0), context_window=200_000)
    meter = UsageMeter(ModelCatalog({"m:x": entry}), "m:x")
    compacted = ContextCompacted(
        first_seq=0, last_seq=1, summary="s", trigger="manual", model="m:x", tokens_before=151_000
    )
    fold(meter, answer(150_000), compacted)
    assert meter.used is None
    assert meter.describe() == (
        "The context was compacted from 151,000 tokens; its new size is known after the "
        "next answer. 0.1520 USD spent in this session."
    )
    fold(meter, answer(9_000))
    assert meter.used == 10_000
    assert meter.describe().startswith("10,000 tokens in context of 200,000 (5%)")


def test_the_share_of_the_context_window_is_known_once_both_are() -> None:
    windowed = UsageMeter(ModelCatalog({"m:x": ModelEntry(context_window=200_000)}), "m:x")
    assert windowed.context_share() is None  # no answer yet
    fold(windowed, answer(49_000))
    assert windowed.context_share() == 0.25
    unknown = UsageMeter(ModelCatalog({}), "m:x")
    fold(unknown, answer(49_000))
    assert unknown.context_share() is None
