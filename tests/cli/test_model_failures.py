"""What a person sees of a failing model: tether's own lines, advice that fits.

Without ``--verbose`` no logger-format line reaches the terminal (a retry is
shown once, as ``[retrying: …]``); with it, tether's own debug lines are
there. A refused connection is said at once, not after five retries; an
answer that is not the provider's API points at the base URL, not the model.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

from tests.acp.harness import fake_model_overlay
from tests.adapters.fake_server import FakeServer, Recorded, Reply, error, stream
from tests.adapters.support import text_answer
from tests.cli.test_commands import env_for

KEY = "sk-failures-0123456789"
MODEL = ("--model", "openai-compatible:m")


async def run(home: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tether.cli.main", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**env_for(home), "TETHER_API_KEY": KEY},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    assert "Traceback" not in err.decode()
    return process.returncode, out.decode(), err.decode()


def overlay(home: Path, url: str) -> tuple[str, str]:
    path = home / "model.yml"
    path.write_text(fake_model_overlay(url, KEY))
    return "--config", str(path)


async def test_a_retry_is_one_line_of_tethers_own_and_verbose_adds_tethers_debug_lines(
    tmp_path: Path,
) -> None:
    async with FakeServer() as server:
        config = overlay(tmp_path, server.url)
        server.queue(error(503, {"error": {"message": "overloaded"}}))
        server.queue(stream(text_answer("fine")))
        status, out, err = await run(tmp_path, *config, "run", *MODEL, "hi")
        assert status == 0, err
        assert out.strip() == "fine"
        assert [line for line in err.splitlines() if "overloaded" in line] == [
            line for line in err.splitlines() if line.startswith("[retrying: ")
        ]
        assert "WARNING" not in err and "tether.loop.retry" not in err

        server.queue(stream(text_answer("again")))
        status, out, err = await run(tmp_path, "-v", *config, "run", *MODEL, "hi")
        assert status == 0, err
        assert "DEBUG tether.llm.service: model request to openai-compatible:m" in err


async def test_a_refused_connection_is_said_at_once_with_what_to_check(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port now.
    config = overlay(tmp_path, f"http://127.0.0.1:{port}")
    status, out, err = await run(tmp_path, *config, "run", *MODEL, "hi")
    assert status == 1
    assert out == ""
    assert "[retrying" not in err
    [line] = [line for line in err.splitlines() if line.startswith("tether: error: ")]
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in line
    assert "check --base-url and that the server is running" in line


async def test_a_page_that_is_not_the_api_points_at_the_base_url(tmp_path: Path) -> None:
    async def html(request: Recorded, reply: Reply) -> None:
        await reply.respond(200, "<html>a proxy's page</html>", [("content-type", "text/html")])

    async with FakeServer() as server:
        server.queue(html)
        status, _out, err = await run(tmp_path, *overlay(tmp_path, server.url), "run", *MODEL, "hi")
    assert status == 1
    [line] = [line for line in err.splitlines() if line.startswith("tether: error: ")]
    assert "text/html" in line and "check --base-url" in line
    assert "model name" not in line
