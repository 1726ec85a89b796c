"""A model's reasoning on the web page, in Debian's Chromium: folded under its answer's
step, opened by a click or the keyboard. The model is a fake Chat Completions server
(on an event loop of its own thread) that streams ``reasoning_content`` first, as
DeepSeek's and llama.cpp's servers do."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.adapters.fake_server import FakeServer, Script, stream
from tests.adapters.support import delta, usage
from tests.web.test_browser import (
    _need_chromium,
    _new_session,
    _prompt,
    _turn_ended,
    launched_chromium,
    served,
    signed_in,
)

THOUGHT = "The user asks why; the sky scatters blue light most."
ANSWER = "Because of Rayleigh scattering."


@contextlib.contextmanager
def model_server(*scripts: Script) -> Iterator[str]:
    """A :class:`FakeServer` answering ``scripts`` in order, on an event loop of its own
    thread (the browser tests are not coroutines); its URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> FakeServer:
        server = FakeServer()
        await server.__aenter__()
        server.queue(*scripts)
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield server.url
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_reasoning_is_folded_under_the_answer_and_opens_from_the_keyboard(
    tmp_path: Path,
) -> None:
    _need_chromium()
    answer = stream(
        [
            delta(reasoning=THOUGHT[:20]),
            delta(reasoning=THOUGHT[20:]),
            delta(ANSWER),
            delta(finish="stop"),
            usage(40, 12),
            "[DONE]",
        ]
    )
    with model_server(answer) as url:
        flags = ("--mode", "auto", "--model", "openai-compatible:local", "--base-url", f"{url}/v1")
        with (
            served(tmp_path / "home", *flags) as server,
            launched_chromium() as browser,
            signed_in(browser, server) as context,
        ):
            page = _new_session(context, server, tmp_path)
            _prompt(page, "why is the sky blue?")
            _turn_ended(page)
            folded = page.locator("#transcript details.reasoning")
            assert folded.count() == 1
            assert folded.evaluate("node => node.open") is False
            text = folded.locator(".reasoning-text")
            assert not text.is_visible()
            assert page.locator("#transcript .assistant", has_text=ANSWER).is_visible()
            folded.locator("summary").focus()
            page.keyboard.press("Enter")
            text.wait_for(state="visible")
            assert text.inner_text() == THOUGHT
            assert page.errors == []
