"""Exit statuses the command line documents, on the paths no other test pins: a bad
argument 2, a runtime failure 1, a signal 128 + its number (130 Ctrl-C, 143 SIGTERM)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for, session_id, tether

UNKNOWN = "19990101-000000-00000000"


def tether_process(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env_for(home), **(env or {})},
    )


def test_chat_resume_of_an_unknown_session_is_a_bad_argument_in_one_line(tmp_path: Path) -> None:
    result = tether(tmp_path, "chat", "--resume", UNKNOWN, input="")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"tether: error: no stored session '{UNKNOWN}' (see: tether sessions list)"
    )
    assert "usage:" not in result.stderr


def test_sigterm_cancels_a_chat_turn_and_exits_143(tmp_path: Path) -> None:
    chat = tether_process(tmp_path, "chat")
    assert chat.stdin is not None and chat.stderr is not None
    chat.stdin.write("$ sleep 30\n")
    chat.stdin.flush()
    while "→ bash sleep 30" not in chat.stderr.readline():
        pass
    chat.send_signal(signal.SIGTERM)
    _out, err = chat.communicate(timeout=30)
    assert chat.returncode == 143, err
    assert "(SIGTERM: the running turn is cancelled and the chat ends)" in err
    assert "(turn stopped: cancelled by user)" in err


def test_sessions_tail_exits_130_on_ctrl_c_and_2_for_an_unknown_session(tmp_path: Path) -> None:
    sid = session_id(tether(tmp_path, "run", "hello").stderr)
    tail = tether_process(tmp_path, "sessions", "tail", sid[:12])  # a unique prefix will do
    assert tail.stdout is not None
    while json.loads(tail.stdout.readline())["type"] != "turn/end":
        pass
    tail.send_signal(signal.SIGINT)
    _out, err = tail.communicate(timeout=30)
    assert tail.returncode == 130, err
    unknown = tether(tmp_path, "sessions", "tail", UNKNOWN)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert f"no stored session '{UNKNOWN}'" in unknown.stderr


def test_sessions_cancel_of_an_unknown_session_is_a_bad_argument(tmp_path: Path) -> None:
    invalid = tether(tmp_path, "sessions", "cancel", "../escape")
    assert invalid.returncode == 2
    assert invalid.stderr.strip() == "tether: error: '../escape' is not a session id"


def test_ctrl_c_stops_tether_web_with_130(tmp_path: Path) -> None:
    web = tether_process(tmp_path, "web", "--mode", "auto", env={"TETHER_MODEL": "offline"})
    assert web.stdout is not None
    assert web.stdout.readline().startswith("http://127.0.0.1:")
    web.send_signal(signal.SIGINT)
    _out, err = web.communicate(timeout=30)
    assert web.returncode == 130, err


def test_sessions_tail_of_a_session_deleted_meanwhile_fails_in_one_line(tmp_path: Path) -> None:
    sid = session_id(tether(tmp_path, "run", "hello").stderr)
    tail = tether_process(tmp_path, "sessions", "tail", sid)
    assert tail.stdout is not None
    while json.loads(tail.stdout.readline())["type"] != "turn/end":
        pass
    assert tether(tmp_path, "sessions", "delete", sid).returncode == 0
    _out, err = tail.communicate(timeout=30)
    assert tail.returncode == 1
    assert err.strip().splitlines() == [f"tether: session {sid!r} is not stored"]


def test_acp_on_an_empty_stdin_that_cannot_be_polled_exits_at_once_as_on_eof(
    tmp_path: Path,
) -> None:
    # /dev/null is a character device the kernel's poller refuses (EPERM): it
    # is read like a regular file, and its end ends the server.
    for stdout in (subprocess.PIPE, subprocess.DEVNULL):
        with open("/dev/null", "rb") as devnull:
            result = subprocess.run(
                [sys.executable, "-m", "tether.cli.main", "acp"],
                stdin=devnull,
                stdout=stdout,
                stderr=subprocess.PIPE,
                env=env_for(tmp_path),
                timeout=30,
                check=False,
            )
        assert result.returncode == 0, result.stderr
        assert b"Operation not permitted" not in result.stderr


def test_ctrl_c_while_the_chat_starts_never_leaves_it(tmp_path: Path) -> None:
    import time

    from tests.cli.terminal import CTRL_C, Terminal

    # -v: asyncio's first debug line says tether's own code runs; from then on
    # Ctrl-C never leaves the chat, before the line editor has the terminal too.
    terminal = Terminal(tmp_path, options=("-v",))
    try:
        terminal.expect("Using selector")
        pressed = time.monotonic()
        while time.monotonic() - pressed < 1.0:
            terminal.send(CTRL_C)
            time.sleep(0.01)
        terminal.expect("(/help lists the commands)")
        terminal.send(b"/quit\r")
        assert terminal.finish() == 0, terminal.output()[-2000:]
    finally:
        terminal.close()


def test_a_bare_tether_on_a_terminal_is_the_chat(tmp_path: Path) -> None:
    from tests.cli.terminal import Terminal

    terminal = Terminal(tmp_path, command="-v")
    try:
        terminal.expect("(/help lists the commands)")
        terminal.send(b"/quit\r")
        assert terminal.finish() == 0
    finally:
        terminal.close()


def test_cancelling_a_turn_says_when_it_dropped_queued_prompts(tmp_path: Path) -> None:
    chat = tether_process(tmp_path, "chat")
    assert chat.stdin is not None and chat.stderr is not None
    chat.stdin.write("$ sleep 30\n")
    chat.stdin.flush()
    while "→ bash sleep 30" not in chat.stderr.readline():
        pass
    chat.stdin.write("and then this\n")
    chat.stdin.flush()
    while "(queued:" not in chat.stderr.readline():
        pass
    chat.stdin.write("/cancel\n/quit\n")
    chat.stdin.flush()
    _out, err = chat.communicate(timeout=30)
    assert chat.returncode == 0, err
    assert "(the queued prompt dropped too: never sent)" in err
    assert 'You said: "and then this"' not in _out
