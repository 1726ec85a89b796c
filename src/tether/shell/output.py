"""One output stream of a command: a tail in memory, the whole stream spilled to disk.

* :class:`SpillDir` — a private directory for the spill files, made on first use.
* :class:`OutputStream` — the last N bytes in memory, the whole stream spilled
  to a private file once it outgrows N, and a read cursor that hands out only
  what was not read before.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import logging
import os
import shutil
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class SpillDir:
    """A private directory (mode 0700) for spill files (mode 0600), created on first use.

    :meth:`remove` deletes it with everything in it; opening a file afterwards
    raises.
    """

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent
        self._path: str | None = None
        self._removed = False

    @property
    def path(self) -> str | None:
        return self._path

    def open(self, name: str) -> tuple[int, str]:
        """Create the file ``name`` for writing; return its descriptor and path.

        Raises:
            OSError: the directory or the file could not be created (or the
                directory was removed).
        """
        if self._removed:
            raise OSError(errno.ENOENT, "the spill directory was removed")
        if self._path is None:
            # Imported here: most commands never spill, and start-up need not pay for it.
            import tempfile

            self._path = tempfile.mkdtemp(prefix="tether-shell-", dir=self._parent)
        path = os.path.join(self._path, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        return os.open(path, flags, 0o600), path

    def remove(self) -> None:
        self._removed = True
        if self._path is not None:
            try:
                shutil.rmtree(self._path)
            except OSError:
                log.exception("could not remove the shell spill directory %s", self._path)
            self._path = None


# -- output ----------------------------------------------------------------------


SpillOpener = Callable[[], tuple[int, str]]


class OutputStream:
    """One output stream of a command.

    Memory holds the last ``limit`` bytes (as the chunks the pipe delivered,
    so appending never copies). The moment the stream grows past ``limit``,
    everything so far is written to a spill file and every later chunk is
    appended to it, so the file always holds the whole stream; it is closed
    at EOF. A stream that stays within ``limit`` never touches the disk.
    """

    __slots__ = (
        "_chunks",
        "_decoder",
        "_eof",
        "_held",
        "_limit",
        "_open_spill",
        "_read",
        "_spill_fd",
        "_spill_path",
        "_total",
    )

    def __init__(self, limit: int, open_spill: SpillOpener | None) -> None:
        if limit <= 0:
            raise ValueError(f"an output limit must be positive, got {limit}")
        self._limit = limit
        self._open_spill = open_spill
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._total = 0
        self._read = 0
        self._spill_fd: int | None = None
        self._spill_path: str | None = None
        self._eof = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    @property
    def total(self) -> int:
        """Bytes written to the stream so far."""
        return self._total

    @property
    def truncated(self) -> bool:
        """True once the stream outgrew what memory keeps."""
        return self._total > self._limit

    @property
    def spill_path(self) -> str | None:
        """The file holding the whole stream, once it outgrew memory (if it could be written)."""
        return self._spill_path

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self._total += len(data)
        self._chunks.append(data)
        self._held += len(data)
        if self._spill_fd is not None:
            self._spill(data)
        elif self._total > self._limit and self._open_spill is not None:
            self._start_spill()
        chunks = self._chunks
        while self._held - len(chunks[0]) >= self._limit:
            self._held -= len(chunks.popleft())

    def close(self) -> None:
        """EOF: no more data will come; the spill file is complete."""
        self._eof = True
        self._open_spill = None
        self._close_spill()

    def tail(self) -> str:
        """The last ``limit`` bytes, decoded (starting at a character boundary when cut)."""
        return _decode_cut(self._bytes_from(self._available_from()), cut=self.truncated)

    def take(self) -> tuple[str, bool]:
        """The output not taken before, decoded; and whether part of it was lost from memory.

        An incomplete UTF-8 sequence at the end is held back until the rest
        arrives (or EOF). When part was lost, what is returned starts at a
        character boundary of the part memory still holds.
        """
        available = self._available_from()
        gap = self._read < available
        data = self._bytes_from(max(self._read, available))
        self._read = self._total
        if gap:
            self._decoder.reset()
            data = _skip_continuation(data)
        return self._decoder.decode(data, final=self._eof), gap

    def release(self) -> None:
        """Drop the bytes held in memory (when nothing will ask for them again)."""
        self._chunks.clear()
        self._held = 0

    def _available_from(self) -> int:
        return max(self._total - self._held, self._total - self._limit)

    def _bytes_from(self, offset: int) -> bytes:
        skip = offset - (self._total - self._held)
        if skip >= self._held:
            return b""
        data = b"".join(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
        return data[skip:] if skip > 0 else data

    def _start_spill(self) -> None:
        opener, self._open_spill = self._open_spill, None
        assert opener is not None
        try:
            self._spill_fd, self._spill_path = opener()
        except OSError:
            log.exception("could not create a spill file; only the tail of the output is kept")
            return
        for chunk in self._chunks:
            self._spill(chunk)

    def _spill(self, data: bytes) -> None:
        fd = self._spill_fd
        assert fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            log.exception("writing the spill file %s failed; it is discarded", self._spill_path)
            self._close_spill()
            if self._spill_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self._spill_path)
            self._spill_path = None

    def _close_spill(self) -> None:
        fd, self._spill_fd = self._spill_fd, None
        if fd is not None:
            os.close(fd)


def _skip_continuation(data: bytes) -> bytes:
    """Drop UTF-8 continuation bytes at the start of a cut (at most three)."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] <= 0xBF:
        start += 1
    return data[start:]


def _decode_cut(data: bytes, *, cut: bool) -> str:
    return (_skip_continuation(data) if cut else data).decode("utf-8", "replace")


# -- the process group -----------------------------------------------------------
