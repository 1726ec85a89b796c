"""The line editor of ``tether chat`` on a terminal, with prompt_toolkit (imported here only).

What it offers (documented in docs/cli.md):

* history, persisted per user in ``<data dir>/chat-history`` (mode 0600):
  Up/Down walk it, Ctrl-R searches it; an entry over
  :data:`HISTORY_ENTRY_LIMIT` characters (a pasted log) is not kept;
* multi-line input: a paste keeps its newlines (bracketed paste), Alt-Enter
  (or Esc then Enter) starts a new line; no size limit;
* Tab completes slash commands (the chat's and the ``commands`` registry's)
  and paths;
* Enter sends the line; **Ctrl-S** sends it as steering for the running turn;
  Ctrl-C goes to the chat (cancel the turn, else clear the line); Ctrl-D on
  an empty line ends the chat.

The prompt stays on the last lines of the terminal while the agent works:
text written to :attr:`LineEditor.out` appears above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.styles import Style

HISTORY_ENTRY_LIMIT = 64 * 1024
"""Entries longer than this many characters are not written to the history file."""

DRAIN_DELAY = 0.03
"""Seconds output written above the prompt may wait, so one redraw carries many lines."""
REDRAW_AGAIN = 0.05
"""Seconds after a refresh when the prompt is drawn once more (see :meth:`LineEditor.refresh`)."""


class Entry(NamedTuple):
    """A line the person entered: a prompt or a command, and whether to steer with it."""

    text: str
    steer: bool = False


Commands = Callable[[], Iterable[tuple[str, str]]]
"""The slash commands offered now: ``(name, description)`` pairs."""


class LineEditor:
    """Reads entries on the terminal; see the module docs.

    ``message`` and ``toolbar`` are asked for the prompt and the status line
    each time the prompt is drawn; ``interrupt`` is called on Ctrl-C and
    returns whether it stopped something (else the line is cleared).
    """

    def __init__(
        self,
        *,
        history: Path,
        commands: Commands,
        message: Callable[[], str],
        toolbar: Callable[[], str],
        interrupt: Callable[[], bool],
    ) -> None:
        self._steer = False
        self._ended = False
        self._interrupt = interrupt
        self._again: asyncio.TimerHandle | None = None
        self.out = AboveThePrompt(self._running_app)
        """Where text goes so that it appears above the prompt."""
        self._session: PromptSession[str] = PromptSession(
            # Styled, so that the prompt's closing space is drawn as text.
            message=lambda: [("class:prompt", message())],
            style=Style.from_dict({"prompt": "bold"}),
            bottom_toolbar=toolbar,
            history=_PrivateHistory(history),
            completer=_Completions(commands),
            complete_while_typing=False,
            key_bindings=self._bindings(),
            erase_when_done=True,
            refresh_interval=0.1,
        )

    def _running_app(self) -> object | None:
        app = self._session.app
        return app if app.is_running else None

    def _bindings(self) -> KeyBindings:
        keys = KeyBindings()

        @keys.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @keys.add("c-s")
        def _steer(event: KeyPressEvent) -> None:
            if event.current_buffer.text.strip():
                self._steer = True
                event.current_buffer.validate_and_handle()

        @keys.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            if not self._interrupt():
                event.current_buffer.reset()

        return keys

    async def read(self) -> Entry | None:
        """The next entry; ``None`` once input has ended (Ctrl-D, :meth:`end`)."""
        if self._ended:
            return None
        self._steer = False
        try:
            # Ctrl-C is a key while the prompt reads; the chat handles SIGINT otherwise.
            text = await self._session.prompt_async(handle_sigint=False)
        except EOFError:
            return None
        if self._ended:
            return None
        return Entry(text, self._steer)

    def refresh(self) -> None:
        """Draw the prompt and status line again (what they show has changed).

        prompt_toolkit drops, rather than postpones, a redraw asked for while
        the prompt is starting or output is being written above it: a status
        that changes then (a turn that fails at once, a retry's wait) would
        stay undrawn until the next change. So the prompt is drawn once more
        :data:`REDRAW_AGAIN` seconds later.
        """
        app = self._session.app
        if not app.is_running:
            return
        app.invalidate()
        if self._again is None:
            self._again = asyncio.get_running_loop().call_later(REDRAW_AGAIN, self._redraw_again)

    def _redraw_again(self) -> None:
        self._again = None
        app = self._session.app
        if app.is_running:
            app.invalidate()

    async def drained(self) -> None:
        """Return once everything written to :attr:`out` is on the terminal."""
        await self.out.drained()

    def end(self) -> None:
        """End input: a pending :meth:`read` returns ``None``, and so does every later one."""
        self._ended = True
        app = self._session.app
        if app.is_running and not app.future.done():  # type: ignore[union-attr]
            app.exit(exception=EOFError())


class AboveThePrompt(io.TextIOBase):
    """A text stream whose lines appear above the prompt while one is shown.

    Writes are gathered for :data:`DRAIN_DELAY` seconds and shown in one
    redraw; an unfinished last line waits for its end (or :meth:`drained`).
    Without a running prompt, text goes straight to the terminal.
    """

    def __init__(self, running_app: Callable[[], object | None]) -> None:
        super().__init__()
        self._running_app = running_app
        self._real = sys.__stdout__ or sys.stdout
        self._pending: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._writing: list[Awaitable[None]] = []

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._real.fileno()

    def write(self, text: str) -> int:
        if text:
            self._pending.append(text)
            if self._timer is None:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(DRAIN_DELAY, self._drain, False)
        return len(text)

    def flush(self) -> None:
        """Nothing to do: :meth:`drained` is the barrier."""

    def _drain(self, whole: bool) -> None:
        self._timer = None
        text = "".join(self._pending)
        self._pending.clear()
        if not whole and not text.endswith("\n"):
            complete, _, rest = text.rpartition("\n")
            if rest:
                self._pending.append(rest)
            text = complete + "\n" if complete else ""
        if not text:
            return
        real = self._real

        def show() -> None:
            real.write(text)
            real.flush()

        if self._running_app() is None:
            show()
            return
        self._writing = [f for f in self._writing if not _done(f)]
        self._writing.append(run_in_terminal(show, in_executor=False))

    async def drained(self) -> None:
        """Return once everything written so far is on the terminal."""
        if self._timer is not None:
            self._timer.cancel()
        self._drain(True)
        writing, self._writing = self._writing, []
        for shown in writing:
            await shown


def _done(awaitable: Awaitable[None]) -> bool:
    return isinstance(awaitable, asyncio.Future) and awaitable.done()


class _PrivateHistory(FileHistory):
    """The history file, readable by its owner only; long entries are left out."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
        os.close(descriptor)
        os.chmod(path, 0o600)
        super().__init__(str(path))

    def store_string(self, string: str) -> None:
        # The history is a convenience: a full disk must not end the chat.
        if len(string) <= HISTORY_ENTRY_LIMIT:
            with contextlib.suppress(OSError):
                super().store_string(string)


class _Completions(Completer):
    """Slash commands at the start of the line; paths in any other word."""

    def __init__(self, commands: Commands) -> None:
        self._commands = commands

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and not any(c.isspace() for c in before):
            for name, description in self._commands():
                if name.startswith(before[1:]):
                    yield Completion(
                        f"/{name}", start_position=-len(before), display_meta=description
                    )
            return
        word = "" if not before or before[-1].isspace() else before.split()[-1]
        yield from _paths(word.removeprefix("@"))


def _paths(word: str) -> Iterator[Completion]:
    """Completions of ``word`` as a path (``~`` expanded), directories ending in ``/``."""
    folder, _, prefix = word.rpartition("/")
    where = os.path.expanduser(folder + "/" if folder or word.startswith("/") else ".")
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix) or (name.startswith(".") and not prefix.startswith(".")):
            continue
        suffix = "/" if os.path.isdir(os.path.join(where, name)) else ""
        yield Completion(name + suffix, start_position=-len(prefix))
