"""The model a session runs on: the configuration's, remembered by the session, overridden by flags.

Each test runs ``tether`` as a user does (a subprocess) against fake
OpenAI- and Anthropic-compatible servers on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import anthropic_text, text_answer
from tests.cli.test_commands import env_for, session_id

OPENAI_KEY = "sk-config-0123456789"
ANTHROPIC_KEY = "sk-ant-test-0123456789"

_MODEL_VARIABLES = (
    "TETHER_MODEL",
    "TETHER_BASE_URL",
    "TETHER_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)


async def tether(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``tether ARGS`` with no model chosen by the environment (unless ``env`` says)."""
    clean = {k: v for k, v in env_for(home).items() if k not in _MODEL_VARIABLES}
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tether.cli.main", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**clean, **(env or {})},
        cwd=home,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def user_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "tether.yml").write_text(text)


def config_with_model(url: str, model: str = "config-model") -> str:
    """A ``tether.yml`` whose agent loop runs ``openai-compatible:MODEL``, served at ``url``."""
    return f"""\
plugins:
  - id: agent_loop
    config:
      model: openai-compatible:{model}
  - id: openai
    plugin: tether.llm.adapters.openai
    config:
      providers:
        openai-compatible:
          base_url: "{url}/v1"
          api_key: "{OPENAI_KEY}"
"""


async def test_the_model_set_in_tether_yml_is_the_one_run_uses(tmp_path: Path) -> None:
    async with FakeServer() as server:
        user_config(tmp_path, config_with_model(server.url))
        server.queue(stream(text_answer("from the configured model")))
        status, out, err = await tether(tmp_path, "run", "hello")
    assert status == 0, err
    assert "from the configured model" in out
    assert "offline" not in err
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json["model"] == "config-model"


async def test_config_show_shows_the_model_set_in_tether_yml(tmp_path: Path) -> None:
    user_config(tmp_path, config_with_model("http://127.0.0.1:9"))
    status, out, err = await tether(tmp_path, "config", "show")
    assert status == 0, err
    assert "model: openai-compatible:config-model" in out
    assert "offline model" not in err


async def test_the_model_flag_still_wins_over_tether_yml(tmp_path: Path) -> None:
    user_config(tmp_path, config_with_model("http://127.0.0.1:9"))
    status, out, err = await tether(tmp_path, "run", "--model", "offline", "hello")
    assert status == 0, err
    assert "offline model" in out


async def test_continue_runs_on_the_anthropic_model_and_base_url_the_session_ran_on(
    tmp_path: Path,
) -> None:
    key = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    async with FakeServer() as server:
        server.queue(stream(anthropic_text("first")), stream(anthropic_text("second")))
        model = ("--model", "anthropic:claude-test", "--base-url", f"{server.url}/v1")
        status, out, err = await tether(tmp_path, "run", *model, "c1", env=key)
        assert status == 0, err
        sid = session_id(err)
        status, out, err = await tether(tmp_path, "run", "--continue", "c2", env=key)
    assert status == 0, err
    assert "second" in out
    assert "offline" not in err and "not configured" not in err
    assert session_id(err) == sid
    assert [r.path for r in server.requests] == ["/v1/messages", "/v1/messages"]
    assert {r.json["model"] for r in server.requests} == {"claude-test"}
    # The key came from the environment each time, and is nowhere in the log.
    assert all(r.headers["x-api-key"] == ANTHROPIC_KEY for r in server.requests)
    stored = (tmp_path / "sessions" / f"{sid}.jsonl").read_text()
    assert ANTHROPIC_KEY not in stored


async def test_resume_with_a_base_url_moves_the_session_there_and_remembers_it(
    tmp_path: Path,
) -> None:
    async with FakeServer() as first, FakeServer() as second:
        first.queue(stream(text_answer("one")))
        second.queue(stream(text_answer("two")), stream(text_answer("three")))
        model = ("--model", "openai-compatible:local", "--base-url", f"{first.url}/v1")
        status, _out, err = await tether(tmp_path, "run", *model, "c1")
        assert status == 0, err
        sid = session_id(err)
        moved = ("--resume", sid, "--base-url", f"{second.url}/v1")
        status, out, err = await tether(tmp_path, "run", *moved, "c2")
        assert status == 0, err
        assert "two" in out
        status, out, err = await tether(tmp_path, "run", "--continue", "c3")
        assert status == 0, err
        assert "three" in out
    assert len(first.requests) == 1 and len(second.requests) == 2
    assert {r.json["model"] for r in (*first.requests, *second.requests)} == {"local"}


async def test_model_flag_on_continue_switches_the_session_and_the_switch_is_kept(
    tmp_path: Path,
) -> None:
    async with FakeServer() as server:
        server.queue(stream(text_answer("two")), stream(text_answer("three")))
        status, _out, err = await tether(tmp_path, "run", "hello")
        assert status == 0, err
        switch = ("--model", "openai-compatible:other", "--base-url", f"{server.url}/v1")
        status, out, err = await tether(tmp_path, "run", "--continue", *switch, "c2")
        assert status == 0, err
        assert "two" in out
        status, out, err = await tether(tmp_path, "run", "--continue", "c3")
        assert status == 0, err
        assert "three" in out
    assert [r.json["model"] for r in server.requests] == ["other", "other"]
