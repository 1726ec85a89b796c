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


async def test_after_a_retried_cut_stdout_holds_only_the_stored_answer(tmp_path: Path) -> None:
    from tests.adapters.support import delta

    async with FakeServer() as server:
        config = overlay(tmp_path, server.url)
        server.queue(stream([delta("The final answer")], end=False))
        server.queue(stream(text_answer("The final answer is 42.")))
        status, out, err = await run(tmp_path, *config, "run", *MODEL, "hi")
        assert status == 0, err
        assert out == "The final answer is 42.\n"
        assert "[retrying: " in err

        # --stream writes as it comes: the cut attempt is on stdout, and marked.
        server.queue(stream([delta("The final answer")], end=False))
        server.queue(stream(text_answer("The final answer is 42.")))
        status, out, err = await run(tmp_path, *config, "run", "--stream", *MODEL, "hi")
        assert status == 0, err
        assert out == "The final answer\nThe final answer is 42.\n"
        assert "(the answer above was cut off; it starts again)" in err


async def test_the_json_result_names_the_error_without_a_prefix(tmp_path: Path) -> None:
    import json

    async with FakeServer() as server:
        server.queue(error(400, {"error": {"message": "no such model"}}))
        config = overlay(tmp_path, server.url)
        status, out, _err = await run(
            tmp_path, *config, "run", "--output-format", "json", *MODEL, "hi"
        )
    assert status == 1
    result = json.loads(out)
    assert result["is_error"] is True
    assert result["error"].startswith("openai-compatible: HTTP 400 (bad-request): no such model")


async def test_run_ends_with_the_turns_tokens_and_cost_and_json_carries_total_cost_usd(
    tmp_path: Path,
) -> None:
    import json

    async with FakeServer() as server:
        path = tmp_path / "model.yml"
        path.write_text(
            fake_model_overlay(server.url, KEY)
            + "  - id: llm\n    config:\n      models:\n"
            + '        "openai-compatible:m": {prices: {input: 1000000.0, output: 2000000.0}}\n'
        )
        config = ("--config", str(path))
        server.queue(stream(text_answer("priced")))  # usage: 5 in, 1 out
        status, _out, err = await run(tmp_path, *config, "run", *MODEL, "hi")
        assert status == 0, err
        assert err.splitlines()[-1] == "tokens: 5 in, 1 out · 7.0000 USD (session 7.0000 USD)"
        server.queue(stream(text_answer("priced")))
        status, out, err = await run(
            tmp_path, *config, "run", "--output-format", "json", *MODEL, "hi"
        )
        assert status == 0, err
        assert json.loads(out)["total_cost_usd"] == 7.0
