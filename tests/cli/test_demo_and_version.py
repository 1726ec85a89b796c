"""The command line, run as a real subprocess."""

import subprocess
import sys

from tether import __version__


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_version_prints_the_package_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"tether {__version__}"


def test_demo_shows_the_service_cascade_and_clean_teardown() -> None:
    result = run("demo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.index("row greeter: pending") < lines.index("row greeter: active", 3)
    assert lines[-1] == "all plugins disposed"
    assert result.stderr == ""


def test_unknown_command_is_a_usage_error() -> None:
    result = run("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
