"""The example programs run offline and keep working."""

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, data_dir: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_config_agents_example_needs_no_handle(tmp_path: Path) -> None:
    out = run_example("config_agents.py", tmp_path)
    assert "greeter answered: This is the offline model" in out
    assert (tmp_path / "sessions" / "greeter.jsonl").exists()


def test_handles_example_creates_prompts_cancels_and_disposes(tmp_path: Path) -> None:
    out = run_example("handles.py", tmp_path)
    assert "first turn: {'kind': 'completed'}" in out
    assert "cancelled before it ran; turns so far: 1" in out
    assert "disposed; live agents: 0" in out


def test_turn_handles_example_follows_each_prompt_to_its_end(tmp_path: Path) -> None:
    out = run_example("turn_handles.py", tmp_path).splitlines()
    assert out == [
        "claimed by turn 1",
        'ended: completed | This is the offline model, a script and not an LLM. You said: "hello".',
        "same turn: True",
        "never ran, cancelled by user",
    ]
    assert len(list((tmp_path / "sessions").glob("*.jsonl"))) == 1


def test_a_custom_tool_plugin_loads_from_a_yaml_overlay(tmp_path: Path) -> None:
    import os

    folder = EXAMPLES / "word_count"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli.main",
            "--config",
            str(folder / "tether.yml"),
            "run",
            '/tool word_count {"text": "one two three"}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TETHER_HOME": str(tmp_path), "PYTHONPATH": str(folder)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "3 words, 13 characters" in result.stdout
