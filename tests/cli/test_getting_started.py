"""Getting started: ``config path``, ``config init`` and ``doctor``, as a new user runs them."""

from __future__ import annotations

import asyncio
import stat
import sys
from pathlib import Path

from tests.acp.harness import fake_model_overlay
from tests.adapters.fake_server import FakeServer, error, stream
from tests.adapters.support import text_answer
from tests.cli.test_commands import env_for, tether

KEY = "sk-doctor-0123456789"


def test_config_path_names_where_config_and_sessions_live(tmp_path: Path) -> None:
    shown = tether(tmp_path, "config", "path")
    assert shown.returncode == 0, shown.stderr
    assert f"config    {tmp_path / 'tether.yml'} (absent" in shown.stdout
    assert f"data      {tmp_path}" in shown.stdout


def test_config_init_writes_a_private_commented_config_that_composes(tmp_path: Path) -> None:
    written = tether(tmp_path, "config", "init")
    assert written.returncode == 0, written.stderr
    user = tmp_path / "tether.yml"
    assert stat.S_IMODE(user.stat().st_mode) == 0o600
    assert tether(tmp_path, "config", "show").returncode == 0
    again = tether(tmp_path, "config", "init")
    assert again.returncode == 1 and "--force replaces it" in again.stderr
    # Every example works once uncommented.
    text = user.read_text()
    uncommented = "\n".join(
        "  " + line[4:] if line.startswith(("  # - ", "  #   ")) else line
        for line in text.splitlines()
    )
    user.write_text(uncommented)
    # The example model is DeepSeek's, whose key comes from the environment.
    key = {"DEEPSEEK_API_KEY": "sk-template-0123456789", "TETHER_MODEL": ""}
    shown = tether(tmp_path, "config", "show", env=key)
    assert shown.returncode == 0, shown.stderr + uncommented
    assert "model: deepseek:deepseek-chat" in shown.stdout
    assert "tether.persist.sqlite" in shown.stdout and "tether.loop.retry" in shown.stdout
    assert "max_steps: 50" in shown.stdout
    assert "model: deepseek:deepseek-chat" in shown.stdout
    assert "offline model" not in shown.stderr
    assert tether(tmp_path, "config", "init", "--force").returncode == 0
    assert user.read_text() == text


async def doctor(home: Path, server: FakeServer) -> tuple[int, str]:
    overlay = home / "model.yml"
    overlay.write_text(fake_model_overlay(server.url, KEY))
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tether.cli.main", "--config", str(overlay)),
        *("doctor", "--model", "openai-compatible:test-model"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(home),
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert b"Traceback" not in err, err
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_doctor_reports_the_data_directory_and_the_models_latency(tmp_path: Path) -> None:
    async with FakeServer() as server:
        server.queue(stream(text_answer("ok")))
        status, out = await doctor(tmp_path, server)
    assert status == 0, out
    [sessions, model] = out.splitlines()
    assert sessions == f"ok       sessions: {tmp_path} is writable (0 stored)"
    assert model.startswith("ok       model: openai-compatible:test-model answered in ")
    assert model.endswith(" ms ('ok')")
    (request,) = server.requests
    assert request.json["max_tokens"] == 16


async def test_doctor_says_what_to_do_about_a_refused_key(tmp_path: Path) -> None:
    async with FakeServer() as server:
        server.queue(error(401, {"error": {"message": "invalid api key"}}))
        status, out = await doctor(tmp_path, server)
    assert status == 1
    line = out.splitlines()[1]
    assert line.startswith("problem  model: openai-compatible:test-model: ")
    assert "invalid api key" in line and "check the API key" in line


def test_doctor_on_the_offline_model_says_how_to_configure_one(tmp_path: Path) -> None:
    result = tether(tmp_path, "doctor")
    assert result.returncode == 1
    assert "problem  model: the offline model" in result.stdout
    assert "--model" in result.stdout


async def run_hello(home: Path, *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``tether run ARGS hello`` in ``home`` with ``env`` added: status, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tether.cli.main", "run", *args, "hello"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**env_for(home), **env},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_model_tether_yml_names_is_the_one_a_start_uses_unless_model_is_given(
    tmp_path: Path,
) -> None:
    async with FakeServer() as server:
        server.queue(stream(text_answer("from the configured model")))
        (tmp_path / "tether.yml").write_text(
            fake_model_overlay(server.url, KEY)
            + "  - id: agent_loop\n    config: {model: 'openai-compatible:configured'}\n"
        )
        # The configuration comes before TETHER_MODEL (docs/models.md).
        env = {"TETHER_MODEL": "offline", "DEEPSEEK_API_KEY": "", "TETHER_API_KEY": ""}
        status, out, err = await run_hello(tmp_path, env=env)
        assert status == 0, err
        assert out.strip() == "from the configured model"
        (request,) = server.requests
        assert request.json["model"] == "configured"
        assert request.headers["authorization"] == f"Bearer {KEY}"

        status, out, err = await run_hello(tmp_path, "--model", "offline", env=env)
        assert status == 0, err
        assert "offline model" in out
        assert len(server.requests) == 1


def test_a_model_in_tether_yml_that_is_not_a_string_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "tether.yml").write_text("plugins:\n  - id: agent_loop\n    config: {model: 7}\n")
    result = tether(tmp_path, "run", "hello")
    assert result.returncode == 2
    said = "tether: error: the agent_loop row's model must be PROVIDER:MODEL, not 7\n"
    assert result.stderr == said


def test_doctor_reports_a_model_without_its_key_as_a_problem_and_still_checks_storage(
    tmp_path: Path,
) -> None:
    result = tether(
        tmp_path,
        "doctor",
        "--model",
        "anthropic",
        env={"ANTHROPIC_API_KEY": "", "TETHER_API_KEY": ""},
    )
    assert result.returncode == 1, result.stderr
    assert "usage:" not in result.stderr and "tether: error:" not in result.stderr
    [sessions, model] = result.stdout.splitlines()
    assert sessions.startswith("ok       sessions: ")
    assert model.startswith(
        "problem  model: model 'anthropic' needs an API key: set ANTHROPIC_API_KEY"
    )


def test_doctor_says_what_to_do_when_sessions_cannot_be_stored(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    result = tether(tmp_path, "--data-dir", str(blocked / "home"), "doctor")
    assert result.returncode == 1
    sessions = result.stdout.splitlines()[0]
    assert sessions.startswith("problem  sessions: ")
    assert sessions.endswith(
        "give a data directory tether can create and write (--data-dir or TETHER_HOME), "
        "or fix the persistence row of the configuration"
    )


def test_commands_that_show_the_model_themselves_print_no_offline_notice(tmp_path: Path) -> None:
    env = {"TETHER_MODEL": "", "DEEPSEEK_API_KEY": "", "TETHER_API_KEY": ""}
    shown = tether(tmp_path, "config", "show", env=env)
    assert shown.returncode == 0 and "model: offline" in shown.stdout
    checked = tether(tmp_path, "doctor", env=env)
    assert "problem  model: the offline model" in checked.stdout
    initialize = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    served = tether(tmp_path, "acp", input=initialize, env=env)
    assert served.returncode == 0, served.stderr
    for result in (shown, checked, served):
        assert "offline model" not in result.stderr
    ran = tether(tmp_path, "run", "hi", env=env)
    assert "using the offline model" in ran.stderr
