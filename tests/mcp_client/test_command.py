"""``tether mcp add / list / test / remove`` against the SDK test server on stdio."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.mcp_client.support import SDK_SERVER, http_server
from tether.cli.main import main


def tether(home: Path, *words: str) -> int:
    return main(["--data-dir", str(home), "mcp", *words])


def test_add_list_test_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tether.yml"
    config.write_text("# mine\nplugins:\n  - id: agent_loop  # the loop\n")
    assert tether(tmp_path, "add", "-e", "A=1", "sdk", "--", sys.executable, SDK_SERVER) == 0
    assert tether(tmp_path, "add", "missing", "--", str(tmp_path / "no-such-server")) == 0
    assert "# mine" in config.read_text() and "# the loop" in config.read_text()
    capsys.readouterr()

    assert tether(tmp_path, "test", "sdk") == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("sdk  stdio") and "ok: 11 tool(s): echo, pid" in line
    assert line.endswith("(MCP 2026-07-28)")

    assert tether(tmp_path, "list") == 1  # one of them does not start
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "ok: 11 tool(s)" in lines[0]
    assert lines[1].startswith("missing") and "failed:" in lines[1]

    assert tether(tmp_path, "remove", "missing") == 0
    assert tether(tmp_path, "list") == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_an_http_server_and_a_project_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project.yml"
    words = ("--transport", "http", "-H", "X-Key: k", "--file", str(project))
    assert tether(tmp_path, "add", *words, "web", "http://127.0.0.1:9/mcp") == 0
    assert not (tmp_path / "tether.yml").exists()
    assert project.stat().st_mode & 0o777 == 0o600
    assert main(["--data-dir", str(tmp_path), "--config", str(project), "mcp", "list"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("web  http   http://127.0.0.1:9/mcp  failed: it could not be")


@pytest.mark.parametrize(
    ("words", "code", "message"),
    [
        (("test", "nope"), 2, "no MCP server named 'nope' is configured"),
        (("add", "x", "-e", "A=1", "--", "cmd"), 2, "-e: options go before NAME"),
        (("add", "x"), 2, "give the server's command"),
        (("add", "--transport", "sse", "x", "--", "a", "b"), 2, "takes one URL"),
        (("add", "-e", "novalue", "x", "--", "cmd"), 2, "expected NAME=VALUE"),
        (("add", "--transport", "http", "x", "ftp://h"), 1, "servers.x.url: must be an http"),
        (("remove", "x"), 1, "no server named 'x' is configured here"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    words: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    assert tether(tmp_path, *words) == code
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_an_unreadable_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tether.yml").write_bytes(b"\xff\xfe")
    assert tether(tmp_path, "add", "x", "--", "cmd") == 1
    assert "could not be read" in capsys.readouterr().err


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_an_http_server_is_tested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: str
) -> None:
    async with http_server(transport) as url:
        words = ("add", "--transport", transport, "web", url)
        assert await asyncio.to_thread(tether, tmp_path, *words) == 0
        assert await asyncio.to_thread(tether, tmp_path, "test", "web") == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"web  {transport}") and "ok: 11 tool(s): echo" in line
    assert line.endswith("(MCP 2026-07-28)")
