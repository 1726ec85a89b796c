"""A server's request for input asked on the terminal: ``tether run`` on a real pseudo-terminal.

The server is written with the SDK (:mod:`tests.mcp_client.asking_server`) and
asks during a tool call (``ctx.elicit`` / ``ctx.elicit_url``); the person
answers each field on the terminal, and the server gets the typed answer.
"""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path

from tests.cli.test_ask_mode import exit_status, results
from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for, session_id, tether
from tests.mcp_client.support import HERE

ASKING_SERVER = str(HERE / "asking_server.py")


def run_with_the_asking_server(tmp_path: Path, prompt: str, *flags: str) -> tuple[int, int]:
    """``tether run`` on a terminal, with the asking server (given ``flags``) as ``ask``."""
    config = tmp_path / "servers.yml"
    server = {"command": sys.executable, "args": [ASKING_SERVER, *flags]}
    config.write_text(
        f"plugins:\n  - id: mcp\n    config:\n      servers: {json.dumps({'ask': server})}\n"
    )
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    argv = ["--config", str(config), "run", "--mode", "auto", prompt]
    pid, fd = pty.fork()
    if pid == 0:  # the child: tether run on the terminal
        os.chdir(work)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "tether.cli.main", *argv],
            env_for(tmp_path / "home"),
        )
    return pid, fd


def stored(home: Path, sid: str, kind: str) -> list[dict[str, object]]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    return [r["data"] for r in records if r["type"] == kind]


def test_each_field_is_asked_checked_and_sent_to_the_server(tmp_path: Path) -> None:
    pid, fd = run_with_the_asking_server(tmp_path, "/tool mcp__ask__deploy {}")
    seen: list[str] = []
    first = expect(fd, "answer it? [y]es / [n]o / [c]ancel: ", seen)
    assert "[input] ask asks: Where should it be deployed?" in first
    os.write(fd, b"y\n")
    shown = expect(fd, "Region (a number or a value): ", seen)
    assert "[input]   1. eu" in shown and "[input]   2. us" in shown
    os.write(fd, b"2\n")
    expect(fd, "Replicas: ", seen)
    os.write(fd, b"9\n")  # out of range: said, and asked again
    expect(fd, "[input] at most 5 is expected", seen)
    os.write(fd, b"3\n")
    expect(fd, "Confirm (y/n): ", seen)
    os.write(fd, b"yes\n")
    expect(fd, "Api Token: ", seen)
    os.write(fd, b"tok-very-secret\n")
    expect(fd, "[input] accepted", seen)
    assert exit_status(pid) == 0
    os.close(fd)
    sid = session_id(first)
    [result] = results(tmp_path / "home", sid)
    typed = {"region": "us", "replicas": 3, "confirm": True, "api_token": "tok-very-secret"}
    assert json.loads(str(result["content"]).removeprefix("accept ")) == typed
    [answered] = stored(tmp_path / "home", sid, "elicitation/answered")
    assert answered["content"] == {**typed, "api_token": "***"}


def test_a_url_is_shown_and_a_no_declines_it(tmp_path: Path) -> None:
    pid, fd = run_with_the_asking_server(tmp_path, "/tool mcp__ask__sign_in {}")
    seen: list[str] = []
    shown = expect(fd, "open it, then continue? [y]es / [n]o / [c]ancel: ", seen)
    assert "[input] https://login.example.test/device?code=42" in shown
    os.write(fd, b"n\n")
    expect(fd, "[input] declined", seen)
    assert exit_status(pid) == 0
    os.close(fd)
    sid = session_id(shown)
    assert [r["content"] for r in results(tmp_path / "home", sid)] == ["decline"]


def test_a_url_accepted_then_done_at_the_servers_word_is_said_done(tmp_path: Path) -> None:
    prompt = "/tool mcp__ask__sign_in_done {}"
    pid, fd = run_with_the_asking_server(tmp_path, prompt, "--legacy")
    seen: list[str] = []
    shown = expect(fd, "open it, then continue? [y]es / [n]o / [c]ancel: ", seen)
    os.write(fd, b"y\n")
    expect(fd, "(MCP server ask: what it asked you to do at its URL is done)", seen)
    assert exit_status(pid) == 0
    os.close(fd)
    sid = session_id(shown)
    [done] = stored(tmp_path / "home", sid, "elicitation/completed")
    assert done["elicitation"] == "sign-in-1"


def test_ctrl_c_during_the_question_withdraws_it(tmp_path: Path) -> None:
    pid, fd = run_with_the_asking_server(tmp_path, "/tool mcp__ask__deploy {}")
    seen: list[str] = []
    shown = expect(fd, "answer it? [y]es / [n]o / [c]ancel: ", seen)
    os.write(fd, b"\x03")
    expect(fd, "cancelling", seen)
    exit_status(pid)
    os.close(fd)
    sid = session_id(shown)
    [answered] = stored(tmp_path / "home", sid, "elicitation/answered")
    assert answered["action"] == "cancel"
    assert str(answered["reason"]).startswith("withdrawn")


def test_chat_asks_a_server_s_question_with_its_own_keys(tmp_path: Path) -> None:
    from tests.cli.terminal import Terminal

    config = tmp_path / "servers.yml"
    server = {"command": sys.executable, "args": [ASKING_SERVER]}
    config.write_text(  # the scripted model: chat takes "/tool" for a slash command
        "plugins:\n  - id: scripted\n    plugin: tests.acp.scripted\n"
        f"  - id: mcp\n    config:\n      servers: {json.dumps({'ask': server})}\n"
    )
    chat = Terminal(
        tmp_path / "home",
        *("--model", "scripted", "--mode", "auto"),
        options=("--config", str(config)),
    )
    try:
        chat.expect("you>")
        chat.send(b"call mcp__ask__sign_in {}\r")
        chat.expect("[input] https://login.example.test/device?code=42")
        chat.expect("open it, then continue? [y]es / [n]o / [c]ancel")
        chat.expect("Enter: answer")
        chat.send(b"y\r")
        chat.expect("[input] accepted")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    sid = chat.output().split("session ", 1)[1].split()[0]
    [answered] = stored(tmp_path / "home", sid, "elicitation/answered")
    assert answered["action"] == "accept"


def test_a_run_no_one_can_answer_does_not_tell_servers_they_may_ask(tmp_path: Path) -> None:
    config = tmp_path / "servers.yml"
    server = {"command": sys.executable, "args": [ASKING_SERVER]}
    config.write_text(
        f"plugins:\n  - id: mcp\n    config:\n      servers: {json.dumps({'ask': server})}\n"
    )
    home = tmp_path / "home"
    done = tether(
        home,
        "--config",
        str(config),
        "run",
        "--mode",
        "auto",
        "/tool mcp__ask__deploy {}",
        input="",
    )
    assert done.returncode == 0, done.stderr
    sid = session_id(done.stderr)
    [result] = results(home, sid)
    assert "Elicitation not supported" in str(result["content"])
    assert stored(home, sid, "elicitation/asked") == []
