"""A stop of a command in the client's terminal: ``kind: "terminal"`` on the receipt."""

import time

import pytest

from tether.cli.render import transcript
from tether.session import Stopped, ToolStopped, TurnStart
from tether.session.errors import EventFormatError
from tether.session.log import Session, SessionHeader


def terminal_entry(pgid: int = 0) -> Stopped:
    return Stopped(
        kind="terminal",
        id="call-1",
        pgid=pgid,
        signals=("terminal/kill",),
        exit_code=None,
        exit_signal="SIGKILL",
        seconds=0.012,
    )


def test_a_terminal_entry_has_pgid_zero_and_the_others_a_real_group() -> None:
    assert terminal_entry().pgid == 0
    with pytest.raises(EventFormatError, match="a terminal's pgid is 0"):
        terminal_entry(pgid=42)
    with pytest.raises(EventFormatError, match="pgid must be a positive int"):
        Stopped("call", "c", 0, ("SIGTERM",), None, "SIGTERM", 0.1)


def test_the_transcript_says_the_terminal_was_the_clients() -> None:
    session = Session(SessionHeader(id="t", created_at=time.time(), cwd="/"))
    session.append(TurnStart(turn=1))
    session.append(ToolStopped(turn=1, cause="user", stopped=(terminal_entry(),)))
    shown = "\n".join(transcript(session))
    assert (
        "stopped terminal call-1: in the client's terminal, sent terminal/kill, "
        "ended by SIGKILL in 12 ms"
    ) in shown
