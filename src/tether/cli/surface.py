"""Where the work is shown: plain text, or Markdown and colours on a terminal.

A :class:`Surface` takes what :class:`~tether.cli.work.WorkView` shows — the
answer as it streams, the model's reasoning, whole lines about tools and the
turn (each with a :data:`Style`), and a transient status — and writes it.

* :class:`PlainSurface` writes text as it is: the answer to ``out``, the
  rest to ``err``, no escape sequence (a pipe, a file, ``NO_COLOR``).
* :class:`RichSurface` renders the answer as Markdown and colours the rest,
  with `rich <https://rich.readthedocs.io>`_ (imported when it is built).
  The answer is rendered a line at a time as it completes (a table once its
  last row has come, a fenced code block line by line), so rendering costs
  the same for every line of an answer however long it grows: a stream never
  falls behind because the answer got long.

A write that fails (a closed pipe, a full device) is kept in
:attr:`PlainSurface.output_error` and writing stops; the command says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console

Style = Literal["", "tool", "output", "error", "added", "removed", "notice", "dim", "user"]
"""What a line is, for a surface that colours: a tool call, its output, an error, …"""

Status = Callable[[str | None], None]
"""Shows a transient status (``None`` clears it)."""


class Surface(Protocol):
    """What :class:`~tether.cli.work.WorkView` writes to."""

    output_error: OSError | None

    def answer(self, delta: str) -> None:
        """More of the answer's text (Markdown)."""

    def thinking(self, delta: str) -> None:
        """More of the model's reasoning."""

    def line(self, text: str, style: Style = "") -> None:
        """One whole line about the work (the answer's open line is ended first)."""

    def end_block(self) -> None:
        """The answer or reasoning streamed so far is complete: show what is pending."""

    def answered(self) -> None:
        """The model finished an answer: its text is the stored answer's."""

    def abandon(self) -> None:
        """The answer streaming since the last :meth:`answered` was cut off and is
        asked again: what is held of it is dropped, what was shown is marked."""


ABANDONED = "(the answer above was cut off; it starts again)"
"""The mark under an abandoned attempt's text, where it was shown already."""


class PlainSurface:
    """Text as it is: the answer on ``out``, the rest on ``err``.

    With ``hold``, the answer's text is kept until :meth:`release` (called once
    the turn is durable) instead of written as it streams.
    """

    def __init__(self, out: TextIO, err: TextIO, *, hold: bool = False) -> None:
        self._out = out
        self._err = err
        self._held: list[str] | None = [] if hold else None
        self._open: list[TextIO] = []
        """The streams whose last line is unfinished."""
        self._thinking = False
        self._kept = 0
        """How many held pieces belong to completed answers."""
        self._attempt_shown = False
        """Text of the current attempt was written (not held)."""
        self.output_error: OSError | None = None

    def answered(self) -> None:
        self._kept = len(self._held) if self._held is not None else 0
        self._attempt_shown = False

    def abandon(self) -> None:
        self._thinking = False
        if self._held is not None:
            del self._held[self._kept :]
            if self._out in self._open:
                self._open.remove(self._out)
            if self._held and not self._held[-1].endswith("\n"):
                self._open.append(self._out)
        if self._attempt_shown:
            self._attempt_shown = False
            self.line(ABANDONED)

    def release(self) -> None:
        """Write the answer held so far, and from now on write it as it streams."""
        held, self._held = self._held, None
        if held:
            self._write(self._out, "".join(held))

    def _write(self, stream: TextIO, text: str) -> None:
        if self.output_error is not None or not text:
            return
        if stream is self._out and self._held is not None:
            self._held.append(text)
            self._mark(stream, text)
            return
        try:
            stream.write(text)
            stream.flush()
        except OSError as exc:
            self.output_error = exc
            return
        self._mark(stream, text)

    def _mark(self, stream: TextIO, text: str) -> None:
        if stream in self._open:
            self._open.remove(stream)
        if not text.endswith("\n"):
            self._open.append(stream)

    def answer(self, delta: str) -> None:
        if self._thinking:
            self.end_block()
        self._write(self._out, delta)
        self._attempt_shown = self._attempt_shown or (self._held is None and bool(delta))

    def thinking(self, delta: str) -> None:
        if not self._thinking:
            self.end_block()
            self._thinking = True
            self._write(self._err, "thinking: ")
        self._write(self._err, delta)

    def line(self, text: str, style: Style = "") -> None:
        self.end_block()
        self._write(self._err, text + "\n")

    def prompt(self, text: str) -> None:
        """``text`` on ``err``, its line left open for what is typed (a later line ends it)."""
        self.end_block()
        self._write(self._err, text)

    def end_block(self) -> None:
        self._thinking = False
        for stream in list(self._open):
            self._write(stream, "\n")


def preload_rich() -> None:
    """Import what :class:`RichSurface` renders with. ``tether run`` calls it in a
    worker thread as the turn starts, so the import overlaps the wait for the
    model's first token instead of delaying the answer."""
    import rich.console
    import rich.markdown
    import rich.text  # noqa: F401


class RichSurface:
    """Markdown and colours, through one rich ``Console``: the answer on ``out``, the
    reasoning and whole lines on ``err`` (by default ``out`` too; both are terminals).
    ``before_write`` is called before each write (a status drawn in place steps aside)."""

    STYLES: ClassVar[dict[str, str]] = {
        "": "",
        "tool": "bold cyan",
        "output": "dim",
        "error": "bold red",
        "added": "green",
        "removed": "red",
        "notice": "yellow",
        "dim": "dim",
        "user": "bold",
    }

    def __init__(
        self,
        out: TextIO,
        err: TextIO | None = None,
        *,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self._out = out
        self._err = err or out
        self._before_write = before_write
        self._console: Console | None = None
        self._markdown = MarkdownLines(self._block, self._code, lambda: self.console.width - 4)
        self._thinking: list[str] = []
        self._partial_shown = False
        """The answer's unfinished line is on screen as plain text (to be redrawn)."""
        self._attempt_shown = False
        """Text of the current attempt was rendered."""
        self.output_error: OSError | None = None

    @property
    def console(self) -> Console:
        """The rich console, made at the first use (importing rich is not free)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=self._out, force_terminal=True, highlight=False, emoji=False, soft_wrap=False
            )
        return self._console

    def _print(self, renderable: object, stream: TextIO | None = None) -> None:
        """Render, then write (to ``out``, or ``stream``) without the padding rich adds to
        the right and below."""
        if self.output_error is not None:
            return
        with self.console.capture() as captured:
            self.console.print(renderable)
        lines = [_trimmed(line) for line in captured.get().split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        while lines and not lines[0]:
            lines.pop(0)
        self._write("\n".join(lines) + "\n", stream)

    def _write(self, text: str, stream: TextIO | None = None) -> None:
        if self.output_error is not None:
            return
        if self._before_write is not None:
            self._before_write()
        if self._partial_shown:
            # The unfinished line drawn as it streamed gives way to what comes.
            text, self._partial_shown = ERASE_LINE + text, False
        target = stream or self._out
        try:
            target.write(text)
            target.flush()
        except OSError as exc:
            self.output_error = exc

    def answered(self) -> None:
        self._attempt_shown = False

    def abandon(self) -> None:
        self._markdown.discard()
        self._thinking = []
        shown = self._attempt_shown or self._partial_shown
        if self._partial_shown:
            self._write("")  # erases the unfinished line
        if shown:
            self.line(ABANDONED, "notice")
        self._attempt_shown = False

    def _block(self, text: str) -> None:
        from rich.markdown import Markdown

        self._attempt_shown = True
        if not text.strip():
            self._write("\n")
        else:
            self._print(Markdown(text, code_theme="ansi_dark", justify="default"))

    def _code(self, line: str) -> None:
        from rich.text import Text

        self._attempt_shown = True
        self._print(Text("  " + line, style="cyan"))

    def answer(self, delta: str) -> None:
        if self._thinking:
            self._end_thinking()
        self._markdown.feed(delta)
        self._show_partial()

    def _show_partial(self) -> None:
        """Draw the answer's unfinished line as it streams, as plain text: it is
        rendered (Markdown) once it ends or fills a row, in its place."""
        text = _PRINTABLE.sub("", self._markdown.partial)
        if not text.strip() or len(text) >= self.console.width - 1:
            return
        self._write(text)
        self._partial_shown = True

    def thinking(self, delta: str) -> None:
        pieces = delta.split("\n")
        self._thinking.append(pieces[0])
        for piece in pieces[1:]:
            self._thinking_line("".join(self._thinking))
            self._thinking = [piece]

    def _thinking_line(self, text: str) -> None:
        from rich.text import Text

        self._print(Text(text, style="dim italic"), self._err)

    def _end_thinking(self) -> None:
        held, self._thinking = "".join(self._thinking), []
        if held:
            self._thinking_line(held)

    def line(self, text: str, style: Style = "") -> None:
        from rich.text import Text

        self.end_block()
        self._print(Text(text, style=self.STYLES[style]), self._err)

    def end_block(self) -> None:
        self._end_thinking()
        self._markdown.finish()


ERASE_LINE = "\r\x1b[2K"
"""Back to the start of the row, and clear it."""

_PRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters: never written raw to the terminal."""

_PADDING = re.compile(r"(?:[ ]|\x1b\[[0-9;]*m)+$")
"""Spaces and style codes at the end of a rendered line."""


def _trimmed(line: str) -> str:
    """A rendered line without its padding ("" when nothing visible is left)."""
    match = _PADDING.search(line)
    if match is None:
        return line
    kept = line[: match.start()]
    if not _STYLE.sub("", kept).strip():
        return ""
    return kept + "\x1b[0m" if "\x1b" in match.group(0) else kept


_STYLE = re.compile(r"\x1b\[[0-9;]*m")

_BLOCK_START = re.compile(r"([-*+>|=]|#{1,6}|\d+[.)])(\s|$)")
"""What would make the rest of a cut line read as a new block (a list, a heading …)."""


def _cut_point(text: str, width: int) -> int:
    """Where to cut ``text`` to at most ``width`` characters: the last space before
    that outside inline code and bold, else the last space, else ``width``."""
    fallback = None
    at = text.rfind(" ", 0, width)
    while at > 0:
        fallback = fallback or at
        head = text[:at]
        if head.count("`") % 2 == 0 and head.count("**") % 2 == 0:
            return at
        at = text.rfind(" ", 0, at)
    return fallback or width


class MarkdownLines:
    """Cuts a streamed Markdown answer into pieces that render on their own.

    Each completed line goes to ``block`` as it comes, except that the rows of
    a table are held until the table ends (a table renders whole), and the
    lines inside a fenced code block go to ``code`` one by one (the fences
    themselves are not shown). A line that grows past ``width`` characters
    before it ends (a long paragraph, streamed slowly) is handed over a
    screen row at a time, cut at a space outside inline code and bold, so a
    long paragraph shows as it comes rather than when it ends. :meth:`finish`
    hands over what is pending. The work per character is constant: nothing
    already handed over is looked at again.
    """

    def __init__(
        self,
        block: Callable[[str], None],
        code: Callable[[str], None],
        width: Callable[[], int] = lambda: 1 << 30,
    ) -> None:
        self._block = block
        self._code = code
        self._width = width
        self._partial: list[str] = []
        self._pending = 0
        """Characters in ``_partial``."""
        self._table: list[str] = []
        self._fence: str | None = None

    def feed(self, delta: str) -> None:
        """More text of the answer."""
        if "\n" in delta:
            first, *middle, last = delta.split("\n")
            self._partial.append(first)
            self._line("".join(self._partial))
            for line in middle:
                self._line(line)
            self._partial = [last] if last else []
            self._pending = len(last)
        else:
            self._partial.append(delta)
            self._pending += len(delta)
        if self._pending > self._width() and not self._table:
            self._cut_long_line()

    def discard(self) -> None:
        """Drop what is pending (a cut-off answer's unfinished line, table or fence)."""
        self._partial, self._pending, self._table, self._fence = [], 0, [], None

    @property
    def partial(self) -> str:
        """The unfinished line not handed over yet ("" inside a table or a fence,
        whose lines show when they are complete)."""
        if self._table or self._fence is not None:
            return ""
        return "".join(self._partial)

    def finish(self) -> None:
        """The answer (or this part of it) is complete."""
        if self._partial:
            line, self._partial = "".join(self._partial), []
            self._pending = 0
            self._line(line)
        self._end_table()
        self._fence = None

    def _cut_long_line(self) -> None:
        text = "".join(self._partial)
        if text.lstrip().startswith(("|", "```", "~~~")) and self._fence is None:
            self._partial = [text]
            return
        width = max(self._width(), 20)
        while len(text) > width:
            cut = _cut_point(text, width)
            head, text = text[:cut].rstrip(), text[cut:].lstrip()
            if self._fence is not None:
                self._code(head)
            else:
                self._block(head)
            if _BLOCK_START.match(text):
                text = "\\" + text
        self._partial = [text] if text else []
        self._pending = len(text)

    def _line(self, line: str) -> None:
        stripped = line.lstrip()
        if self._fence is not None:
            if stripped.startswith(self._fence) and not stripped[len(self._fence) :].strip():
                self._fence = None
            else:
                self._code(line)
            return
        if stripped.startswith(("```", "~~~")):
            self._end_table()
            self._fence = stripped[:3]
            return
        if stripped.startswith("|"):
            self._table.append(line)
            return
        self._end_table()
        self._block(line)

    def _end_table(self) -> None:
        if self._table:
            table, self._table = "\n".join(self._table), []
            self._block(table)
