"""The event stream parser: the standard's line rules, and llama.cpp's ``error:`` line."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether.llm.adapters.sse import parse_events


async def events(*pieces: str) -> list[tuple[str, str]]:
    async def chunks() -> AsyncIterator[str]:
        for piece in pieces:
            yield piece

    return [(event.event, event.data) async for event in parse_events(chunks())]


async def test_lines_end_with_crlf_cr_or_lf_even_split_between_pieces() -> None:
    parsed = await events("data: one\r", "\n\r\ndata: two\r\rdata: th", "ree\n\n")
    assert parsed == [("message", "one"), ("message", "two"), ("message", "three")]


async def test_comments_are_skipped_and_data_lines_join() -> None:
    parsed = await events(": keep-alive\n\n", "event: delta\ndata: a\ndata:b\n\n")
    assert parsed == [("delta", "a\nb")]


async def test_an_event_without_data_or_a_blank_line_is_not_dispatched() -> None:
    assert await events("event: ping\n\n", "data: cut short") == []


async def test_a_llama_cpp_error_line_is_an_error_event() -> None:
    parsed = await events('error: {"code":400,"message":"too long"}\n\ndata: [DONE]\n\n')
    assert parsed == [("error", '{"code":400,"message":"too long"}'), ("message", "[DONE]")]
