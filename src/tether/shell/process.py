"""Process mechanics: one ``bash -c`` in its own process group, and its end.

Its environment is :mod:`tether.shell.environment`'s, its output streams are
:mod:`tether.shell.output`'s, its parent-death signal is
:mod:`tether.shell.parent_death`'s.

* :class:`ShellProcess` — a running command. It is driven entirely by the
  event loop's callbacks (pipe data, pipe EOF, process exit, timers), so a
  command in flight costs no task; :meth:`ShellProcess.wait` is how its owner
  awaits the end.
* :class:`GroupProbe` and :func:`group_emptied` — how any owner of a process
  group (a command here, an MCP server) learns that the group has emptied.

When a command *ends*: its leader (bash) has exited, its process group is
gone (or has been sent SIGKILL), and its output pipes have reached EOF (or
were closed because a process outside the group still held them after the
kill grace). A group outliving its leader is stopped like any other: SIGTERM,
then SIGKILL after the grace. A process that moved itself to another session
(``setsid``) has left the group and is out of reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from signal import SIGKILL, SIGTERM, Signals

from tether.shell.confinement import confined_spawn
from tether.shell.definition import StopReport
from tether.shell.output import OutputStream
from tether.shell.sandbox import ProtectedWatch, SandboxPolicy

log = logging.getLogger(__name__)


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for a number the platform does not name."""
    try:
        return Signals(number).name
    except ValueError:
        return f"SIG{number}"


# -- spill files -----------------------------------------------------------------


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


class GroupProbe:
    """Calls ``on_empty()`` once no process of group ``pgid`` is alive (zombies do not count).

    Nothing announces that a group has emptied, so it is probed with
    :func:`group_alive` on the event loop's timers, at a growing interval (1 ms
    doubling to 100 ms): a probe costs no task. :meth:`start` begins probing
    (a second call while probing does nothing); :meth:`cancel` stops it, and
    ``on_empty`` is then never called. ``on_empty`` is called at most once per
    :meth:`start`, from the event loop.
    """

    def __init__(self, pgid: int, on_empty: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._pgid = pgid
        self._on_empty = on_empty
        self._handle: asyncio.Handle | None = None
        self._delay = _PROBE_FIRST

    def start(self) -> None:
        if self._handle is None:
            self._handle = self._loop.call_soon(self._probe)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _probe(self) -> None:
        if group_alive(self._pgid):
            self._handle = self._loop.call_later(self._delay, self._probe)
            self._delay = min(self._delay * 2, _PROBE_MAX)
            return
        self._handle = None
        self._on_empty()


async def group_emptied(pgid: int) -> None:
    """Return once no process of group ``pgid`` is alive (see :class:`GroupProbe`).

    It waits as long as that takes: bound it with a timeout. Cancelling the
    wait stops the probing.
    """
    emptied: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle() -> None:
        if not emptied.done():
            emptied.set_result(None)

    probe = GroupProbe(pgid, settle)
    probe.start()
    try:
        await emptied
    finally:
        probe.cancel()


class ShellProcess:
    """One ``bash -c COMMAND`` in a new session (its own process group), stdin from /dev/null
    unless a descriptor is given.

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
        self._probe = GroupProbe(self._pgid, self._group_emptied)
        self._drain: asyncio.TimerHandle | None = None
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._end_callbacks: list[Callable[[], None]] = []
        self._stop_requested_at: float | None = None
        self._ended_at: float | None = None
        self._signals_sent: list[str] = []
        self.sandbox: str | None = None
        """The confinement applied, in one line; ``None`` when none was asked for."""
        self._protected: ProtectedWatch | None = None
        self.on_output: Callable[[bytes], None] | None = None
        """Called with each piece of output (stdout or stderr) as it is read;
        one that raises is logged and dropped."""
        self.appeared: tuple[str, ...] = ()
        """The protected paths that appeared while a confined process ran (see
        :class:`~tether.shell.sandbox.ProtectedWatch`); set when it ends."""

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
        sandbox: SandboxPolicy | None = None,
        stdin: int | None = None,
    ) -> ShellProcess:
        """Start ``bash -c command`` (must be called from the event loop's thread),
        confined to ``sandbox`` (see :mod:`tether.shell.confinement`); what was
        applied is :attr:`sandbox`. ``stdin`` is a readable file descriptor the
        command reads (it is not closed here); ``/dev/null`` when not given.

        Raises:
            OSError: the process could not be created (``cwd`` vanished, no
                bash, no resources), or the sandbox cannot be enforced and its
                fallback is ``refuse``
                (:class:`~tether.shell.confinement.SandboxUnavailableError`).
        """
        with confined_spawn(sandbox, os.getpid()) as launch:
            popen, pipes = cls._start(
                [*launch.prefix, bash, "-c", command], cwd, env, launch.preexec, stdin
            )
        for fd in pipes:
            os.set_blocking(fd, False)
            _widen(fd)
        process = cls(popen, pipes, stdout, stderr, grace)
        process.sandbox = launch.record
        process._protected = launch.watch
        process._watch()
        return process

    @staticmethod
    def _start(
        argv: list[str],
        cwd: str,
        env: Mapping[str, str],
        preexec: Callable[[], None] | None,
        stdin: int | None = None,
    ) -> tuple[subprocess.Popen[bytes], tuple[int, int]]:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=out_write,
                stderr=err_write,
                cwd=cwd,
                env=env,
                start_new_session=True,
                # Safe with threads: it takes no lock, it only makes system calls.
                preexec_fn=preexec,  # noqa: PLW1509
            )
        except BaseException:
            for fd in (out_read, err_read):
                os.close(fd)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        return popen, (out_read, err_read)

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
            if self.on_output is not None:
                self._tell(data)
        else:
            self._close_pipe(fd)
            self._advance()

    def _tell(self, data: bytes) -> None:
        listener = self.on_output
        assert listener is not None
        try:
            listener(data)
        except Exception:
            log.exception("an output listener of process %d failed; it is dropped", self._pgid)
            self.on_output = None

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
        self._probe.cancel()
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
            # Probed until it has emptied or the SIGKILL deadline comes.
            self._probe.start()
            return
        if not self._pipes:
            self._finish()
        elif self._drain is None:
            # A process outside the group may hold the pipes; read on for a
            # while, then stop listening.
            self._drain = self._loop.call_later(self._grace, self._close_pipes)

    def _group_emptied(self) -> None:
        if self._ended.done() or self._group_settled:
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
        for handle in (self._deadline, self._drain):
            self._cancel(handle)
        self._deadline = self._drain = None
        self._probe.cancel()
        self._ended_at = self._loop.time()
        if self._protected is not None:
            self.appeared = self._protected.appeared()
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
