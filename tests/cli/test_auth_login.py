"""``tether auth``: a key typed on a terminal is stored privately, used when the
variable is unset, and never printed; without a terminal, or over a damaged
file, it refuses in one line and changes nothing."""

import stat
from pathlib import Path

import pytest

from tests.cli.terminal import Terminal
from tests.cli.test_commands import tether

KEY = "sk-typed-0123456789abcdef"
NO_KEYS = {"DEEPSEEK_API_KEY": "", "TETHER_API_KEY": "", "TETHER_MODEL": ""}


def login(home: Path, provider: str, typed: bytes) -> tuple[int, str]:
    """``tether auth login PROVIDER`` on a terminal, typing ``typed``: status and output."""
    terminal = Terminal(home, "login", provider, command="auth", env=NO_KEYS)
    try:
        terminal.expect("API key (not shown): ")
        terminal.send(typed + b"\r")
        status = terminal.finish()
        return status, terminal.output()
    finally:
        terminal.close()


def test_auth_login_stores_the_typed_key_in_a_private_file_and_status_never_prints_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    status, shown = login(home, "deepseek", KEY.encode())
    assert status == 0, shown
    assert "Stored the DeepSeek API key" in shown
    assert KEY not in shown  # not echoed as it was typed
    stored = home / "credentials.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert [p.name for p in home.iterdir()] == ["credentials.json"]  # no temporary left

    listed = tether(home, "auth", "status", env=NO_KEYS)
    assert listed.returncode == 0
    assert "deepseek     stored (tether auth login)" in listed.stdout
    assert KEY not in listed.stdout + listed.stderr
    overridden = tether(home, "auth", "status", env={**NO_KEYS, "DEEPSEEK_API_KEY": "sk-env"})
    assert "deepseek     DEEPSEEK_API_KEY (environment)" in overridden.stdout

    removed = tether(home, "auth", "logout", "deepseek", env=NO_KEYS)
    assert removed.returncode == 0 and not stored.exists()


def test_auth_login_refuses_a_key_that_cannot_be_sent_and_stores_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    status, shown = login(home, "openai", b"sk-with space")
    assert status == 1
    assert "contains spaces, control or non-ASCII characters; nothing stored" in shown
    assert not (home / "credentials.json").exists()


def test_auth_login_without_a_terminal_refuses_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = tether(home, "auth", "login", "deepseek", input=KEY + "\n", env=NO_KEYS)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "stdin is not one; run it in a terminal, or set DEEPSEEK_API_KEY" in result.stderr
    assert not (home / "credentials.json").exists()


@pytest.mark.parametrize("damage", ["{not json", '{"keys": ["sk-1"]}'])
def test_a_damaged_credentials_file_is_named_in_one_line_and_left_as_it_is(
    tmp_path: Path, damage: str
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    stored = home / "credentials.json"
    stored.write_text(damage)
    for args in (("auth", "status"), ("auth", "logout", "deepseek"), ("run", "hello")):
        result = tether(home, *args, env=NO_KEYS)
        assert result.returncode != 0, args
        assert f"the credentials file {stored} is damaged" in result.stderr, args
        assert "Traceback" not in result.stderr
    status, shown = login_refused(home)
    assert status == 1 and "is damaged" in shown
    assert stored.read_text() == damage


def login_refused(home: Path) -> tuple[int, str]:
    """``tether auth login`` on a terminal that is refused before it asks."""
    terminal = Terminal(home, "login", "deepseek", command="auth", env=NO_KEYS)
    try:
        status = terminal.finish()
        return status, terminal.output()
    finally:
        terminal.close()
