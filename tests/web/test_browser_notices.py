"""Notices on the web page, in Debian's Chromium: a session whose model server cut
the prompt (it counted far fewer prompt tokens than were sent) says so in the
transcript where it happened, in the terminal's words, when the page opens it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import text_answer, usage
from tests.cli.test_commands import session_id
from tests.cli.test_session_model import tether
from tests.web.test_browser import _need_chromium, launched_chromium, served, signed_in


async def _cut_session(data: Path, home: Path) -> str:
    """A session stored under ``data`` whose one prompt the model server cut; its id."""
    long = "Consider this line with care. " * 1_000  # about 7,500 tokens
    async with FakeServer() as model:
        # The server counted 2,048 prompt tokens: it dropped the front of what it was sent.
        model.queue(stream([*text_answer("Fine.")[:-2], usage(2_048, 2), "[DONE]"]))
        flags = ("--model", "openai-compatible:local", "--base-url", f"{model.url}/v1")
        status, _, err = await tether(home, "--data-dir", str(data), "run", *flags, long)
    assert status == 0, err
    return session_id(err)


def test_a_prompt_the_server_cut_is_said_in_the_transcript(tmp_path: Path) -> None:
    _need_chromium()
    data = tmp_path / "data"
    sid = asyncio.run(_cut_session(data, tmp_path))
    with (
        served(data, "--mode", "auto") as server,
        launched_chromium() as browser,
        signed_in(browser, server) as context,
    ):
        page = context.new_page()
        page.goto(f"{server.base}/s/{sid}")
        notice = page.locator("#transcript .notice")
        notice.wait_for()
        text = notice.inner_text()
        assert "counted 2,048 prompt tokens" in text
        assert "it dropped the front of the conversation" in text
        assert "--no-context-shift" in text
        # Where it happened: after the prompt, before the answer's end.
        order = page.locator("#transcript .notice, #transcript .turn-end").evaluate_all(
            "nodes => nodes.map(n => n.className)"
        )
        assert order[0] == "notice", order
