"""The command line as a user runs it: a real subprocess per command."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import broken_model

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def env_for(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TETHER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
    }


def python(
    home: Path,
    *argv: str,
    input: str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env_for(home), **(env or {})},
        check=False,
    )


def tether(
    home: Path,
    *args: str,
    input: str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return python(
        home, "-m", "tether.cli.main", *args, input=input, timeout=timeout, env=env, cwd=cwd
    )


def session_id(stderr: str) -> str:
    line = next(line for line in stderr.splitlines() if line.startswith("session "))
    return line.split()[1]


def test_run_streams_the_answer_and_exits_zero(tmp_path: Path) -> None:
    result = tether(tmp_path, "run", "hello there")
    assert result.returncode == 0, result.stderr
    assert 'You said: "hello there"' in result.stdout
    sid = session_id(result.stderr)
    assert (tmp_path / "sessions" / f"{sid}.jsonl").exists()


STARTUP_PROBE = """
import gc, sys
from tether.cli.process import begin_startup
begin_startup()
from tether.cli.main import main
status = main(sys.argv[1:])
terminal = {"prompt_toolkit", "rich"} & {name.split(".")[0] for name in sys.modules}
print(status, "pydantic" in sys.modules, gc.isenabled(), gc.get_freeze_count() > 0, terminal)
"""


def test_an_offline_run_starts_without_pydantic_or_the_terminal_libraries(
    tmp_path: Path,
) -> None:
    # Importing pydantic is a third of an offline run's start-up: the default
    # composition's configs and the bash tool's arguments are msgspec
    # schemas, so an offline run, tool call included, never imports it. The
    # line editor and Markdown rendering are chat's (and a terminal's) alone.
    result = python(tmp_path, "-c", STARTUP_PROBE, "run", "$ echo probe")
    assert result.returncode == 0, result.stderr
    assert "probe" in result.stdout
    assert result.stdout.splitlines()[-1] == "0 False True True set()"


def test_the_command_line_imports_no_event_loop_or_runtime_before_a_command_runs(
    tmp_path: Path,
) -> None:
    # chat draws its prompt before tether boots: what the command line imports
    # before a command starts delays the prompt (and `--help`, `config show`).
    probe = (
        "import sys; import tether.cli.main; "
        "print(sorted(m for m in ('asyncio', 'msgspec', 'tether.runtime') if m in sys.modules))"
    )
    result = python(tmp_path, "-c", probe)
    assert result.stdout.strip() == "[]", result.stderr


def test_run_resume_continues_the_session(tmp_path: Path) -> None:
    first = tether(tmp_path, "run", "one")
    sid = session_id(first.stderr)
    second = tether(tmp_path, "run", "--resume", sid, "two")
    assert second.returncode == 0, second.stderr
    assert session_id(second.stderr) == sid
    shown = tether(tmp_path, "sessions", "show", sid)
    assert "── turn 1 ──" in shown.stdout and "── turn 2 ──" in shown.stdout
    assert "you: two" in shown.stdout


def test_an_unusable_model_is_refused_before_any_turn(tmp_path: Path) -> None:
    unknown = tether(tmp_path, "run", "--model", "nosuch:x", "hello")
    assert unknown.returncode == 2
    assert "unknown model provider 'nosuch'" in unknown.stderr
    env_key = {"DEEPSEEK_API_KEY": "", "TETHER_API_KEY": ""}
    no_key = tether(tmp_path, "run", "--model", "deepseek:deepseek-chat", "x", env=env_key)
    assert no_key.returncode == 2 and "DEEPSEEK_API_KEY" in no_key.stderr
    assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())


def test_a_model_error_mid_turn_exits_nonzero_with_one_line_saying_what_to_do(
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "broken.yml"
    overlay.write_text(broken_model.OVERLAY)
    result = tether(tmp_path, "--config", str(overlay), "run", "--model", "broken", "hello")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "tether: error: the model is down — the provider is failing; try again later"
    )


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    missing_dir = tether(tmp_path, "run", "--cwd", str(tmp_path / "nope"), "x")
    assert missing_dir.returncode == 2 and "not a directory" in missing_dir.stderr
    missing_config = tether(tmp_path, "--config", str(tmp_path / "nope.yml"), "run", "x")
    assert missing_config.returncode == 2 and "no such file" in missing_config.stderr
    empty = tether(tmp_path, "run", "   ")
    assert empty.returncode == 2 and "empty" in empty.stderr


def test_sessions_list_export_and_delete(tmp_path: Path) -> None:
    sid = session_id(tether(tmp_path, "run", "remember this").stderr)
    listing = tether(tmp_path, "sessions", "list")
    assert sid in listing.stdout and "remember this" in listing.stdout
    exported = tether(tmp_path, "sessions", "export", sid).stdout.splitlines()
    assert json.loads(exported[0])["header"]["id"] == sid
    assert json.loads(exported[-1])["type"] == "turn/end"
    markdown = tether(tmp_path, "sessions", "export", sid, "--format", "md").stdout
    assert markdown.startswith(f"# Session {sid}") and "**You:** remember this" in markdown
    assert tether(tmp_path, "sessions", "delete", sid).returncode == 0
    gone = tether(tmp_path, "sessions", "show", sid)
    assert gone.returncode == 2 and sid in gone.stderr  # no such session: a bad argument


def test_config_show_prints_rows_with_effective_config(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yml"
    overlay.write_text("plugins:\n  - id: agent_loop\n    config: {max_steps: 7}\n")
    result = tether(tmp_path, "--config", str(overlay), "config", "show")
    assert result.returncode == 0, result.stderr
    assert "max_steps: 7" in result.stdout
    assert "batch_window_ms: 20.0" in result.stdout  # defaults filled in


def test_config_show_masks_an_api_key(tmp_path: Path) -> None:
    key = "sk-config-show-0123456789abcdef"
    result = tether(
        tmp_path, "config", "show", "--model", "openai:gpt-4.1", env={"OPENAI_API_KEY": key}
    )
    assert result.returncode == 0, result.stderr
    assert key not in result.stdout + result.stderr
    assert "api_key: '**********'" in result.stdout


def test_config_show_names_a_bad_row(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yml"
    overlay.write_text("plugins:\n  - id: agent_loop\n    config: {max_steps: zero}\n")
    result = tether(tmp_path, "--config", str(overlay), "config", "show")
    assert result.returncode == 1
    assert "config.max_steps" in result.stdout


SLOW = "plugins:\n  - id: slow\n    plugin: tests.cli.slow_model\n"
"""An overlay with the ``slow`` model: one chunk, then it waits for a cancel."""


def slow_run(home: Path, config: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``tether run`` on the slow model (overlay ``config``), once its first chunk streamed."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tether.cli.main", "--config", config),
            *("run", "--stream", "--model", "slow", *args, "take your time"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(home),
    )
    assert process.stdout is not None and process.stderr is not None
    sid = session_id(process.stderr.readline() or process.stderr.readline())
    assert process.stdout.read(len("thinking")) == "thinking"
    return process, sid


@pytest.mark.timeout(60)
def test_ctrl_c_cancels_the_turn_cleanly_and_the_log_closes(tmp_path: Path) -> None:
    overlay = tmp_path / "slow.yml"
    overlay.write_text(SLOW)
    process, sid = slow_run(tmp_path, str(overlay))
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    assert process.returncode == 130
    records = [json.loads(line) for line in (tmp_path / "sessions" / f"{sid}.jsonl").open()]
    assert records[-1]["type"] == "turn/end"
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "cause": "user"}


def test_chat_queues_prompts_handles_commands_and_resumes(tmp_path: Path) -> None:
    script = "first question\n/steer a nudge\n/sessions\n/bogus\nsecond question\n/quit\n"
    result = tether(tmp_path, "chat", input=script)
    assert result.returncode == 0, result.stderr
    # The steer reached the first turn; the second prompt, typed while it
    # ran, was queued as its own turn.
    assert 'You said: "a nudge"' in result.stdout
    assert 'You said: "second question"' in result.stdout
    assert "unknown command '/bogus'" in result.stderr
    sid = session_id(result.stderr)
    again = tether(tmp_path, "chat", "--resume", sid, input="third\n")
    assert again.returncode == 0, again.stderr
    shown = tether(tmp_path, "sessions", "show", sid).stdout
    turns = shown.split("── turn ")[1:]
    assert len(turns) == 3
    # A steer joins the running turn at its next step, once it is stored.
    assert turns[0].index("you: first question") < turns[0].index("you: a nudge")
    assert "you: second question" in turns[1] and "you: third" in turns[2]


def test_chat_without_a_terminal_takes_a_line_of_any_length(tmp_path: Path) -> None:
    long_line = "x" * 200_000  # a pasted log: over the 64 KiB of a default line reader
    result = tether(tmp_path, "chat", input=f"{long_line}\n/quit\n")
    assert result.returncode == 0, result.stderr[-2000:]
    log = next((tmp_path / "sessions").glob("*.jsonl"))
    events = [json.loads(line) for line in log.open()][1:]
    prompts = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert prompts == [long_line]
    assert "you> \ntokens: " in result.stderr  # the prompt's line is ended before more is said


def test_an_overlay_can_disable_a_row(tmp_path: Path) -> None:
    overlay = tmp_path / "no-bash.yml"
    overlay.write_text("plugins:\n  - id: tool_bash\n    disabled: true\n")
    shown = tether(tmp_path, "--config", str(overlay), "config", "show")
    assert "id: tool_bash\n  plugin: tether.plugins.tool_bash\n  disabled: true" in shown.stdout
    result = tether(tmp_path, "--config", str(overlay), "run", "$ echo hi")
    assert result.returncode == 0, result.stderr
    assert "the bash tool is not available" in result.stdout


def test_the_user_overlay_in_tether_home_applies(tmp_path: Path) -> None:
    (tmp_path / "tether.yml").write_text(
        "plugins:\n  - id: agent_loop\n    config: {model: offline, max_steps: 3}\n"
    )
    shown = tether(tmp_path, "config", "show")
    assert "max_steps: 3" in shown.stdout


def test_resuming_a_bad_or_corrupt_session_is_one_clear_line(tmp_path: Path) -> None:
    invalid = tether(tmp_path, "run", "--resume", "../escape", "hi")
    assert invalid.returncode == 2 and "Traceback" not in invalid.stderr  # a bad argument
    assert invalid.stderr.strip().splitlines()[-1].startswith("tether: ")
    sessions = tmp_path / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "broken.jsonl").write_text('{"tether_session":1,"header":{}}\nnot json\n{}\n')
    corrupt = tether(tmp_path, "run", "--resume", "broken", "hi")
    assert corrupt.returncode == 1 and "Traceback" not in corrupt.stderr
    assert "broken" in corrupt.stderr
