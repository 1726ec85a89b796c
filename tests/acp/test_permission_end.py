"""A permission question always ends: unanswered, withdrawn by a cancel, or not understood."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.acp.harness import serving
from tests.acp.test_tools import tool_updates


async def test_an_unanswered_question_is_a_rejection_after_the_timeout(tmp_path: Path) -> None:
    async with serving(tmp_path, "--permission-timeout", "0.5") as server:
        sid = await server.new_session()
        server.client.answer = "never"
        assert await server.prompt(sid, "bash echo waited") == "end_turn"
        status, output = tool_updates(server.client.of(sid))[-1][1:]
        assert status == "failed" and output is not None and "denied" in output
    assert "was not answered within 0.5 s; rejected" in server.stderr()


async def test_a_cancel_withdraws_the_question_and_the_call_ends_cancelled(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        server.client.answer = "never"
        prompt = server.start_prompt(sid, "bash echo never")
        await server.client.wait_for(lambda: len(server.client.permission_requests) == 1)
        await server.conn.cancel(session_id=sid)
        async with asyncio.timeout(10):
            assert await prompt == "cancelled"
        status, output = tool_updates(server.client.of(sid))[-1][1:]
        assert status == "failed" and output is not None
        assert "cancelled" in output and "denied" not in output


async def test_a_client_without_permission_requests_rejects_quietly(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        server.client.answer = "unsupported"
        assert await server.prompt(sid, "bash echo quiet") == "end_turn"
        status, output = tool_updates(server.client.of(sid))[-1][1:]
        assert status == "failed" and output is not None and "denied" in output
    assert "permission request failed" not in server.stderr()
    assert "Traceback" not in server.stderr()


async def test_a_permission_timeout_that_is_not_positive_is_refused(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli.main",
        "acp",
        "--permission-timeout",
        "0",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await process.communicate()
    assert process.returncode == 2
    assert b"must be a positive number of seconds" in stderr
