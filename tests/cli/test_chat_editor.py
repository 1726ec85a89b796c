"""``tether chat`` on a real pseudo-terminal: the line editor, and the work shown as it happens."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

from tests.cli.terminal import CTRL_C, LEFT, UP, Terminal


def events_of(home: Path, session_id: str) -> list[dict[str, Any]]:
    path = home / "sessions" / f"{session_id}.jsonl"
    return [json.loads(line) for line in path.open()][1:]


def prompts_of(events: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for e in events
        if e["type"] == "user/message"
        for block in e["data"]["content"]
    ]


def started(chat: Terminal) -> str:
    """Wait for the chat's banner and the prompt after it; the session id."""
    banner = chat.expect("lists the commands)")
    chat.expect("you>")
    return banner.split("session ", 1)[1].split()[0]


def test_editor_edits_recalls_history_completes_and_takes_a_200_kb_paste(tmp_path: Path) -> None:
    chat = Terminal(tmp_path)
    try:
        session_id = started(chat)
        chat.send(b"helo" + LEFT + b"l\r")  # an arrow moves within the line
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(UP + b"\r")  # the history's last entry, sent again
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"/thin")
        chat.expect("/thin")
        chat.send(b"\t")  # Tab completes the command: the editor draws the rest of it
        chat.expect("king")
        chat.send(b"\r")
        chat.expect("(reasoning is shown)")
        chat.expect("you>")
        chat.send(b"/help\r")
        shown = chat.expect("Ctrl-S")
        assert "/output [N]" in shown and "/compact" in shown
        chat.expect("you>")
        log = "".join(f"line {n:05d} " + "x" * 90 + "\n" for n in range(2_000))
        assert len(log) >= 200_000
        chat.paste(log)
        chat.send(b"\r")
        shown = chat.expect("tokens: ", timeout=60)
        assert f"… 1,997 more lines ({len(log) - 1:,} characters)" in shown  # the echo is folded
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    prompts = prompts_of(events_of(tmp_path, session_id))
    assert prompts[:2] == ["hello", "hello"]
    assert prompts[2] == log.strip()
    history = tmp_path / "chat-history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    kept = history.read_text()
    assert "+hello" in kept and "+/thinking" in kept
    assert "line 01999" not in kept  # a paste that long is not kept


def test_tool_output_is_folded_and_ctrl_c_shows_the_stop_receipt(tmp_path: Path) -> None:
    chat = Terminal(tmp_path)
    try:
        session_id = started(chat)
        chat.send(b"$ seq 1 40\r")
        shown = chat.expect("tokens: ")
        assert "→ bash seq 1 40" in shown
        assert "│ 1\n" in shown and "… 35 more lines (/output 1 shows them all)" in shown
        chat.expect("you>")
        chat.send(b"/output 1\r")
        assert "\n25\n" in chat.expect("[exit code: 0]")
        chat.send(b"$ sleep 30\r")
        chat.expect("→ bash sleep 30")
        chat.expect("· 0 s")  # its time so far in the status: the command runs
        chat.send(CTRL_C)
        shown = chat.expect("(turn stopped: cancelled by user)")
        assert "(cancelled)" in shown
        assert "■ stopped call" in shown and "sent SIGTERM, ended by SIGTERM" in shown
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    ends = [e["data"]["reason"] for e in events_of(tmp_path, session_id) if e["type"] == "turn/end"]
    assert ends[-1] == {"kind": "aborted", "cause": "user"}


def test_a_failing_model_is_one_line_with_what_to_do_and_plugin_commands_run(
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "broken.yml"
    overlay.write_text(
        "plugins:\n"
        "  - id: broken\n    plugin: tests.cli.broken_model\n"
        "  - id: shout\n    plugin: tests.cli.shout_command\n"
        "  - id: retry\n    plugin: tether.loop.retry\n"
        "    config: {max_attempts: 2, base_delay: 0.5, max_delay: 0.5}\n"
    )
    chat = Terminal(tmp_path, "--model", "broken", options=("--config", str(overlay)))
    try:
        started(chat)
        chat.send(b"hello\r")
        shown = chat.expect("error: the model is down — the provider is failing; try again later")
        # The status line said it while waiting. It is drawn in place: a character that
        # the line before had in the same column is skipped, not drawn again.
        assert re.search(r"r?e?t?r?y?i?n?g? in \d\.\d s: the model", shown), shown
        assert "(2/2)" in shown
        chat.expect("you>")
        chat.send(b"/help\r")
        assert "/shout TEXT         Say it louder" in chat.expect("Ctrl-S")
        chat.expect("you>")
        chat.send(b"/shout hello\r")
        chat.expect("HELLO")
        chat.expect("you>")
        chat.send(b"/boom\r")  # a plugin's failing command is one line; the chat goes on
        chat.expect("tether: /boom: failed: RuntimeError: kaboom")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()


def test_ask_mode_shows_the_call_and_takes_the_answer_in_the_editor(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    chat = Terminal(tmp_path, "--mode", "ask")
    try:
        session_id = started(chat)
        chat.send(b"$ echo refused\r")
        chat.expect("[ask] bash echo refused")
        chat.expect("[y/n/a]>")
        chat.send(b"n\r")
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(f"edit {tmp_path / 'notes.txt'}: alpha => beta\r".encode())
        assert "[ask] read" in chat.expect("[y/n/a]>")
        chat.send(b"a\r")  # always: the read, and any later one, runs unasked
        chat.expect("← read done")
        shown = chat.expect("[y/n/a]>")
        assert "[ask] edit" in shown and "-alpha" in shown and "+beta" in shown
        chat.send(b"y\r")
        shown = chat.expect("tokens: ")
        assert "← edit done" in shown
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    results = [e["data"] for e in events_of(tmp_path, session_id) if e["type"] == "tool/result"]
    assert results[0]["is_error"] and "did not allow" in results[0]["content"]
    assert (tmp_path / "notes.txt").read_text() == "beta\n"


def test_while_a_question_is_open_the_status_line_shows_the_keys_that_answer_it(
    tmp_path: Path,
) -> None:
    chat = Terminal(tmp_path, "--mode", "ask")
    try:
        started(chat)
        chat.send(b"$ echo hi\r")
        chat.expect("allow this bash call?")
        chat.expect("y: allow · n: reject · a: always allow")
        chat.send(b"y\r")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
