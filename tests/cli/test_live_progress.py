"""A running command's time and latest output, shown live on a terminal (never in a pipe)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cli.terminal import Terminal
from tests.cli.test_commands import tether

LOOP = "$ for n in 1 2 3 4 5 6; do echo line-$n; sleep 0.5; done"
"""Six lines, one each half second: three seconds of output."""


def test_run_on_a_terminal_shows_a_running_command_s_time_and_latest_line(tmp_path: Path) -> None:
    run = Terminal(tmp_path, LOOP, command="run")
    try:
        run.expect("→ bash for n in")
        started = time.monotonic()
        shown = run.expect("│ line-3")  # in the status, while the command runs
        assert time.monotonic() - started < 2.5
        assert "· 1 s" in shown  # its time so far, above the latest lines
        assert "bash done" not in shown
        assert run.finish() == 0
    finally:
        run.close()
    # When it ends, the usual folded result takes the status's place.
    assert "← bash done (7 lines) #1" in run.output()


def test_chat_shows_a_running_command_s_latest_output_in_its_status(tmp_path: Path) -> None:
    chat = Terminal(tmp_path)
    try:
        chat.expect("you>")
        # Every character of a line differs from the line before: the editor redraws it whole.
        chat.send(b"$ for c in K L M N P Q; do echo $c$c$c$c$c$c; sleep 0.5; done\r")
        shown = chat.expect("MMMMMM")
        assert "bash done" not in shown
        assert "· 1 s" in shown
        chat.expect("← bash done (7 lines)")
        chat.expect("you>")
    finally:
        chat.close()


def test_nothing_of_the_progress_goes_to_a_pipe(tmp_path: Path) -> None:
    result = tether(tmp_path, "run", LOOP)
    assert result.returncode == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        assert "· 0 s" not in stream and "· 1 s" not in stream
    assert "line-6" in result.stdout + result.stderr  # the folded result, as before
