"""Process mechanics: one ``bash -c`` in its own process group, its output, and its end.

* :func:`child_environment` — the environment a command gets: the inherited
  one without secrets, plus a terminal that asks for plain output.
* :class:`OutputStream` — one output stream: the last N bytes in memory, the
  whole stream spilled to a private file once it outgrows N, and a read
  cursor that hands out only what was not read before.
* :class:`ShellProcess` — a running command. It is driven entirely by the
  event loop's callbacks (pipe data, pipe EOF, process exit, timers), so a
  command in flight costs no task; :meth:`ShellProcess.wait` is how its owner
  awaits the end.

When a command *ends*: its leader (bash) has exited, its process group is
gone (or has been sent SIGKILL), and its output pipes have reached EOF (or
were closed because a process outside the group still held them after the
kill grace). A group outliving its leader is stopped like any other: SIGTERM,
then SIGKILL after the grace. A process that moved itself to another session
(``setsid``) has left the group and is out of reach.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Mapping
from signal import SIGKILL, SIGTERM, Signals
from types import MappingProxyType

from tether.fence import is_internal, is_secret
from tether.shell.definition import StopReport

log = logging.getLogger(__name__)

TERMINAL_ENV: Mapping[str, str] = MappingProxyType(
    {"TERM": "dumb", "NO_COLOR": "1", "PAGER": "cat"}
)
"""Set for every command: no colors, no pager, no terminal tricks in captured output."""


def child_environment(
    extra: Mapping[str, str], inherited: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a command: ``inherited`` (default ``os.environ``) without the
    variables whose names look secret and without tether's own ``TETHER_*`` settings
    (see :mod:`tether.fence`), then :data:`TERMINAL_ENV`, then ``extra``.

    ``extra`` is what the caller asked for explicitly, so it is neither
    scrubbed nor overridden.
    """
    source = os.environ if inherited is None else inherited
    env = {
        name: value
        for name, value in source.items()
        if not is_secret(name) and not is_internal(name)
    }
    env.update(TERMINAL_ENV)
    env.update(extra)
    return env


_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[[int, int, int, int, int], int] | None:
    """libc's ``prctl`` (Linux), ready to call; ``None`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    function: Callable[[int, int, int, int, int], int] = prctl
    return function


_prctl = _load_prctl()


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when ``parent`` (this process's
    spawning thread) dies; ``None`` where the platform has no parent-death signal.

    It runs in the child between fork and exec. If the parent died before the
    signal was armed (the child has already been re-parented), the child
    exits at once instead of running unwatched. The signal is cleared by a
    fork, so it reaches the group's leader (bash, or the one command bash
    execs in its place); the rest of the group is the watchdog's
    (:mod:`tether.shell.orphans`).

    A ``preexec_fn`` makes every spawn a full ``fork`` of tether (no
    ``vfork``): about 10 ms each on the development machine. So
    :func:`parent_death` prefers ``setpriv``.
    """
    prctl = _prctl
    if prctl is None:
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(125)

    return arm


_setpriv: list[str | None] = []


def _setpriv_path() -> str | None:
    """util-linux's ``setpriv``, if it is on PATH and knows ``--pdeathsig`` (checked once)."""
    if not _setpriv:
        found = shutil.which("setpriv")
        if found is not None:
            try:
                probe = subprocess.run(
                    [found, "--pdeathsig", "KILL", "--", "true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=5,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                found = None
            else:
                found = found if probe.returncode == 0 else None
        _setpriv.append(found)
    return _setpriv[0]


def parent_death(parent: int) -> tuple[list[str], Callable[[], None] | None]:
    """How to give a child SIGKILL at ``parent``'s death: an argv prefix, or a ``preexec_fn``.

    ``setpriv --pdeathsig KILL --`` (one more exec, about 2 ms) where it is
    available, else :func:`die_with_parent`. With ``setpriv`` the signal is
    armed just after the fork rather than before the exec, so a tether that
    dies in that moment is not noticed by the child (its group is not yet
    recorded either): the residual window of a few milliseconds at a crash.
    """
    setpriv = _setpriv_path()
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--"], None
    return [], die_with_parent(parent)


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for a number the platform does not name."""
    try:
        return Signals(number).name
    except ValueError:
        return f"SIG{number}"


# -- spill files -----------------------------------------------------------------


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

    @property
    def eof(self) -> bool:
        return self._eof

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


def group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is alive; zombies do not count.

    A zombie is dead but stays in the process table (and in its group) until
    its parent reaps it; an orphan's new parent may be slow to do that, or
    never do it (a container's init that does not reap). ``killpg(pgid, 0)``
    cannot tell them apart, so on Linux ``/proc`` settles it.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split(None, 4)
        except OSError:
            continue
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


_PIPE_SIZE = 1 << 18
_F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)


def _widen(fd: int) -> None:
    """Grow the pipe to :data:`_PIPE_SIZE` where the platform allows (Linux).

    The default 64 KiB pipe makes a fast writer and the reader take turns
    every 64 KiB; four times that cuts the event loop's wakeups (and lifts
    throughput) fourfold. A refusal (the user's pipe quota) keeps the default.
    """
    if _F_SETPIPE_SZ is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)


_PROBE_FIRST = 0.001
_PROBE_MAX = 0.1
_READ_SIZE = _PIPE_SIZE


class ShellProcess:
    """One ``bash -c COMMAND`` in a new session (its own process group), stdin from /dev/null.

    Create it with :meth:`spawn`; stop it with :meth:`terminate`; await the
    end with :meth:`wait`. Output goes to the two :class:`OutputStream`\\ s it
    was given. The pipes are read by the event loop's readers; the exit is
    seen through a pidfd where the platform has one (else a thread waits for
    it), so no asyncio child watcher is involved.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pipes: tuple[int, int],
        stdout: OutputStream,
        stderr: OutputStream,
        grace: float,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self._pgid = popen.pid
        self.stdout = stdout
        self.stderr = stderr
        self._grace = grace
        self._returncode: int | None = None
        self._pipes: dict[int, OutputStream] = dict(zip(pipes, (stdout, stderr), strict=True))
        self._pidfd: int | None = None
        self._stopping = False
        """SIGTERM was sent to the group (on request, or because the leader exited
        leaving members behind); SIGKILL follows at the deadline."""
        self._group_settled = False
        """The group is known to be gone, or SIGKILL was sent to it."""
        self._deadline: asyncio.TimerHandle | None = None
        self._probe: asyncio.Handle | None = None
        self._probe_delay = _PROBE_FIRST
        self._drain: asyncio.TimerHandle | None = None
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._end_callbacks: list[Callable[[], None]] = []
        self._stop_requested_at: float | None = None
        self._ended_at: float | None = None
        self._signals_sent: list[str] = []

    @classmethod
    def spawn(
        cls,
        bash: str,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str],
        stdout: OutputStream,
        stderr: OutputStream,
        grace: float,
    ) -> ShellProcess:
        """Start ``bash -c command`` (must be called from the event loop's thread).

        Raises:
            OSError: the process could not be created (``cwd`` vanished, no
                bash, no resources).
        """
        prefix, preexec = parent_death(os.getpid())
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            popen = subprocess.Popen(
                [*prefix, bash, "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=err_write,
                cwd=cwd,
                env=env,
                start_new_session=True,
                # Safe with threads: it takes no lock, it only makes two system calls.
                preexec_fn=preexec,  # noqa: PLW1509
            )
        except BaseException:
            for fd in (out_read, err_read):
                os.close(fd)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        for fd in (out_read, err_read):
            os.set_blocking(fd, False)
            _widen(fd)
        process = cls(popen, (out_read, err_read), stdout, stderr, grace)
        process._watch()
        return process

    # -- state -----------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the process group's id."""
        return self._pgid

    @property
    def ended(self) -> bool:
        return self._ended.done()

    @property
    def exit_code(self) -> int | None:
        """bash's exit status, when it exited (rather than being ended by a signal)."""
        code = self._returncode
        return code if code is not None and code >= 0 else None

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended bash, if one did."""
        code = self._returncode
        return signal_name(-code) if code is not None and code < 0 else None

    def stop_report(self) -> StopReport | None:
        """The receipt of the stop :meth:`terminate` began; ``None`` if it was never stopped."""
        requested = self._stop_requested_at
        if requested is None:
            return None
        ended = self._ended_at
        return StopReport(
            pgid=self._pgid,
            signals=tuple(self._signals_sent),
            exit_code=self.exit_code,
            exit_signal=self.signal,
            seconds=None if ended is None else ended - requested,
        )

    def add_end_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the process ends, before anyone awaiting :meth:`wait` resumes.

        Callbacks run in the order they were added, synchronously, at the
        moment :attr:`ended` becomes true; one that raises is logged.
        """
        if self._ended.done():
            raise RuntimeError(f"process {self._pgid} has already ended")
        self._end_callbacks.append(callback)

    async def wait(self) -> None:
        """Wait until the process has ended. Cancelling the wait does not affect the process."""
        await asyncio.shield(self._ended)

    def terminate(self) -> bool:
        """Stop the whole group: SIGTERM now, SIGKILL after the grace (unless it is gone by then).

        Returns True when this call stopped a running command (its leader had
        not exited); repeated calls do nothing more.
        """
        if self._ended.done() or self._stopping:
            return False
        was_running = self._returncode is None
        self._stop_requested_at = self._loop.time()
        self._stop_group()
        self._advance()
        return was_running

    # -- watching the pipes and the exit ---------------------------------------

    def _watch(self) -> None:
        for fd, stream in self._pipes.items():
            self._loop.add_reader(fd, self._read, fd, stream)
        try:
            self._pidfd = os.pidfd_open(self._pgid)
        except (AttributeError, OSError):
            waiter = threading.Thread(
                target=self._wait_in_thread, name=f"wait:{self._pgid}", daemon=True
            )
            waiter.start()
        else:
            self._loop.add_reader(self._pidfd, self._reap)

    def _read(self, fd: int, stream: OutputStream) -> None:
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            log.exception("reading the output of process %d failed", self._pgid)
            data = b""
        if data:
            stream.feed(data)
        else:
            self._close_pipe(fd)
            self._advance()

    def _close_pipe(self, fd: int) -> None:
        stream = self._pipes.pop(fd)
        self._loop.remove_reader(fd)
        os.close(fd)
        stream.close()

    def _reap(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        assert pidfd is not None
        self._loop.remove_reader(pidfd)
        os.close(pidfd)
        self._exited(self._popen.poll())

    def _wait_in_thread(self) -> None:
        returncode = self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
            self._loop.call_soon_threadsafe(self._exited, returncode)

    def _exited(self, returncode: int | None) -> None:
        # A leader reaped elsewhere (not by us) has an unknown status: report it as 0.
        self._returncode = 0 if returncode is None else returncode
        if not self._stopping:
            # Whatever bash left running in its group does not outlive it.
            self._stop_group()
        self._advance()

    # -- the way to the end --------------------------------------------------------

    def _stop_group(self) -> None:
        self._stopping = True
        if self._signal_group(SIGTERM):
            self._deadline = self._loop.call_later(self._grace, self._kill_group)
        else:
            self._group_settled = True

    def _kill_group(self) -> None:
        self._deadline = None
        self._cancel(self._probe)
        self._signal_group(SIGKILL)
        self._group_settled = True
        self._advance()

    def _signal_group(self, sig: Signals) -> bool:
        """Send ``sig`` to the group; False when the group no longer exists."""
        try:
            os.killpg(self._pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            log.warning("not allowed to send %s to process group %d", sig.name, self._pgid)
        else:
            self._signals_sent.append(sig.name)
        return True

    def _advance(self) -> None:
        if self._ended.done() or self._returncode is None:
            return
        if not self._group_settled:
            # Nothing announces that a group has emptied, so it is probed, at
            # a growing interval, until it has or the SIGKILL deadline comes.
            if self._probe is None:
                self._probe = self._loop.call_soon(self._probe_group)
            return
        if not self._pipes:
            self._finish()
        elif self._drain is None:
            # A process outside the group may hold the pipes; read on for a
            # while, then stop listening.
            self._drain = self._loop.call_later(self._grace, self._close_pipes)

    def _probe_group(self) -> None:
        self._probe = None
        if self._ended.done() or self._group_settled:
            return
        if group_alive(self._pgid):
            self._probe = self._loop.call_later(self._probe_delay, self._probe_group)
            self._probe_delay = min(self._probe_delay * 2, _PROBE_MAX)
            return
        self._cancel(self._deadline)
        self._deadline = None
        self._group_settled = True
        self._advance()

    def _close_pipes(self) -> None:
        self._drain = None
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._advance()

    def _finish(self) -> None:
        for handle in (self._deadline, self._probe, self._drain):
            self._cancel(handle)
        self._deadline = self._probe = self._drain = None
        self._ended_at = self._loop.time()
        self._ended.set_result(None)
        callbacks, self._end_callbacks = self._end_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("an end callback of process %d raised", self._pgid)

    @staticmethod
    def _cancel(handle: asyncio.Handle | None) -> None:
        if handle is not None:
            handle.cancel()
