"""Bad system-prompt and compaction settings are refused with the field and the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_commands import tether
from tether.location import data_dir
from tether.loop import plugin as loop_plugin
from tether.runtime.errors import RuntimeFault
from tether.runtime.plugin import plugin_spec


def refused(config: dict[str, Any]) -> str:
    with pytest.raises(RuntimeFault) as caught:
        plugin_spec(loop_plugin).validate_config(config)
    return str(caught.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"compaction": {"threshold": 0}}, "config.compaction.threshold: must be greater than 0"),
        ({"compaction": {"threshold": 1.5}}, "config.compaction.threshold: must be at most 1"),
        ({"compaction": {"threshold": "most"}}, "config.compaction.threshold"),
        (
            {"compaction": {"threshold": 0.5, "keep_recent": 0.6}},
            "config.compaction.keep_recent: must be less than threshold (0.5), got 0.6",
        ),
        ({"compaction": {"keep_recent": -0.1}}, "config.compaction.keep_recent: must be at least"),
        ({"compaction": {"summary_max_tokens": 10}}, "config.compaction.summary_max_tokens"),
        ({"compaction": {"sometimes": True}}, "config.compaction"),
        (
            {"context_windows": {"qwen3:8b": 100}},
            "config.context_windows.qwen3:8b: must be at least 1024 tokens, got 100",
        ),
        ({"context_windows": {"qwen3:8b": "big"}}, "config.context_windows"),
        ({"context_windows": ["qwen3"]}, "config.context_windows"),
        ({"instructions_max_bytes": 0}, "config.instructions_max_bytes: must be at least 256"),
        ({"instructions": "maybe"}, "config.instructions"),
        ({"user_instructions": "  "}, "config.user_instructions: must not be empty"),
        ({"system": 42}, "config.system"),
        ({"system_append": ["a"]}, "config.system_append"),
    ],
)
def test_a_bad_setting_names_its_field(config: dict[str, Any], message: str) -> None:
    assert message in refused(config)


def test_the_defaults_are_what_the_docs_say() -> None:
    config = plugin_spec(loop_plugin).validate_config({})
    assert isinstance(config, loop_plugin.Config)
    compaction = config.compaction_settings()
    assert (compaction.enabled, compaction.threshold, compaction.keep_recent) == (True, 0.8, 0.25)
    assert compaction.summary_max_tokens == 4_096
    prompt = config.prompt_settings()
    assert prompt.instructions
    assert prompt.user_instructions == data_dir() / "AGENTS.md"
    assert (prompt.max_file_bytes, prompt.max_total_bytes) == (32_768, 65_536)


def test_config_show_reports_a_bad_compaction_setting(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yml"
    overlay.write_text("plugins:\n  - id: agent_loop\n    config: {compaction: {threshold: 2}}\n")
    result = tether(tmp_path, "--config", str(overlay), "config", "show")
    assert result.returncode == 1
    shown = " ".join(result.stdout.split())  # YAML folds long lines
    assert "config.compaction.threshold: must be at most 1, got 2.0" in shown
    assert "Traceback" not in result.stdout + result.stderr


def test_a_bad_setting_stops_tether_run_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yml"
    overlay.write_text("plugins:\n  - id: agent_loop\n    config: {context_windows: {x: 5}}\n")
    result = tether(tmp_path, "--config", str(overlay), "run", "hello")
    assert result.returncode != 0
    assert "config.context_windows.x: must be at least 1024 tokens, got 5" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_user_file_lives_in_the_data_directory_given(tmp_path: Path) -> None:
    result = tether(tmp_path, "--data-dir", str(tmp_path / "elsewhere"), "config", "show")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"user_instructions: {tmp_path / 'elsewhere' / 'AGENTS.md'}" in result.stdout
