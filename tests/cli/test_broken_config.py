"""A configuration file that cannot be used is one line naming it, in every command.

Invalid YAML (with the line and column), text that is not UTF-8, a document
that is not a composition: each command says so in one line on stderr and
exits 2 before anything starts; ``doctor`` reports it as a problem line. No
session is created, and what was stored before stays.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_commands import session_id, tether

BROKEN = {
    "invalid-yaml": (b"plugins: [\n  - id: x\n", "broken.yml:2:3: invalid YAML: "),
    "not-utf8": (b"\xff\xfeplugins: []\n", "broken.yml: not UTF-8 text (byte 0 is 0xff)"),
    "not-a-mapping": (b"[1, 2]\n", "broken.yml: expected a mapping with one key, 'plugins'"),
}
COMMANDS = [("run", "hi"), ("chat",), ("config", "show"), ("sessions", "list"), ("web",)]


def _one_error_line(stderr: str, expected: str) -> None:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("tether: error: ")]
    assert len(errors) == 1, stderr
    assert expected in errors[0]


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_config_file_is_one_line_and_exit_2_in_every_command(
    tmp_path: Path, kind: str
) -> None:
    content, expected = BROKEN[kind]
    broken = tmp_path / "broken.yml"
    broken.write_bytes(content)
    kept = session_id(tether(tmp_path, "run", "before").stderr)
    for command in COMMANDS:
        result = tether(tmp_path, "--config", str(broken), *command, input="")
        assert result.returncode == 2, (command, result.stderr)
        _one_error_line(result.stderr, expected)
        assert result.stdout == ""
    listed = tether(tmp_path, "sessions", "list")
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == [kept]


def test_doctor_reports_a_broken_config_file_as_a_problem_line(tmp_path: Path) -> None:
    (tmp_path / "broken.yml").write_bytes(BROKEN["invalid-yaml"][0])
    result = tether(tmp_path, "--config", str(tmp_path / "broken.yml"), "doctor")
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("problem")]
    assert line.startswith("problem  configuration: ")
    assert "broken.yml:2:3: invalid YAML: " in line


def test_a_broken_user_config_in_tethers_home_is_named_too(tmp_path: Path) -> None:
    (tmp_path / "tether.yml").write_bytes(BROKEN["invalid-yaml"][0])
    result = tether(tmp_path, "run", "hi")
    assert result.returncode == 2
    _one_error_line(result.stderr, f"{tmp_path / 'tether.yml'}:2:3: invalid YAML: ")
