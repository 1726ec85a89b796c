"""A file edit from the command line, offline: what the README's first command shows."""

import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for

ROOT = Path(__file__).resolve().parents[2]


def run_in(cwd: Path, home: Path, prompt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", prompt],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=env_for(home),
        check=False,
    )


def test_tether_run_edits_a_file_offline(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello, world\n")
    result = run_in(work, tmp_path / "home", "edit hello.txt: world => tether")
    assert result.returncode == 0, result.stderr
    assert (work / "hello.txt").read_text() == "hello, tether\n"
    assert "→ read hello.txt" in result.stderr and "→ edit hello.txt" in result.stderr
    assert "  -world\n  +tether\n" in result.stderr  # the edit's diff
    assert result.stdout.startswith("The edit call finished:\nedited hello.txt: 1 replacement")


def test_the_first_command_of_the_readme_shows_an_edit(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_for(tmp_path / "home"),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "hello.txt now reads: hello, tether" in result.stdout
