"""A pseudo-terminal for driving ``tether chat`` as a person would, in tests and benchmarks.

The terminal is 100 columns by 30 rows and answers the cursor position
requests of the line editor (as a real terminal does), so the editor draws its
status line. Output is kept as it arrives; :meth:`Terminal.expect` waits for a
text in the output not yet consumed, with escape sequences removed.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time
from pathlib import Path

from tests.cli.test_commands import env_for

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][0-9A-B]|\r")
CURSOR_REQUEST = b"\x1b[6n"
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
UP, LEFT = b"\x1b[A", b"\x1b[D"
CTRL_C, CTRL_S = b"\x03", b"\x13"


def plain(raw: str) -> str:
    """Terminal output without escape sequences and carriage returns."""
    return ESCAPES.sub("", raw)


class Terminal:
    """``tether [OPTIONS] chat [CHAT_OPTIONS]`` (or another ``command``) on a pseudo-terminal."""

    def __init__(
        self,
        home: Path,
        *chat_options: str,
        options: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        command: str = "chat",
        cwd: Path | None = None,
    ) -> None:
        argv = [sys.executable, "-m", "tether.cli.main", *options, command, *chat_options]
        environment = {**env_for(home), "TERM": "xterm-256color", **(env or {})}
        self.started = time.monotonic()
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: tether chat on the terminal
            if cwd is not None:
                os.chdir(cwd)
            os.execve(sys.executable, argv, environment)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.raw: list[str] = []
        self._consumed = 0
        self.exited = False

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        if CURSOR_REQUEST in chunk:
            os.write(self.fd, b"\x1b[1;1R")
        self.raw.append(chunk.decode(errors="replace"))
        return True

    def output(self) -> str:
        return plain("".join(self.raw))

    def expect(self, text: str, timeout: float = 30) -> str:
        """Wait until ``text`` appears after what earlier calls consumed; return the output
        up to and including it, and consume it."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.output()
            at = shown.find(text, self._consumed)
            if at >= 0:
                before = shown[self._consumed : at + len(text)]
                self._consumed = at + len(text)
                return before
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{text!r} never appeared in {shown[self._consumed :]!r}"
            if not self._read(remaining):
                raise AssertionError(f"{text!r} never appeared before the end: {shown!r}")

    def send(self, data: bytes) -> None:
        """Type ``data`` (of any size: the output is read meanwhile, so neither side blocks)."""
        view = memoryview(data)
        while view:
            _, writable, _ = select.select([], [self.fd], [], 0.05)
            if writable:
                written = os.write(self.fd, view[:4096])
                view = view[written:]
            self._read(0)

    def paste(self, text: str) -> None:
        """Paste ``text`` as a terminal does (bracketed paste)."""
        self.send(PASTE_START + text.encode() + PASTE_END)

    def finish(self, timeout: float = 30) -> int:
        """Wait for the chat to exit; its exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.exited = True
                return os.waitstatus_to_exitcode(status)
            self._read(0.05)
        os.kill(self.pid, 9)
        raise AssertionError(f"the chat did not exit: {self.output()[-2000:]!r}")

    def close(self) -> None:
        if not self.exited:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        os.close(self.fd)
