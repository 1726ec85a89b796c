"""Confining a child process to a :class:`~tether.shell.sandbox.SandboxPolicy` (Linux).

The mechanisms are the kernel's, and need no privilege:

* **Landlock** for the files: a ruleset is built *in tether's process*
  (:func:`prepare`) — one rule per directory or file the policy opens — and
  the child only calls ``landlock_restrict_self`` on it between fork and
  exec. Each writable root is granted whole. Landlock is an allow-list that
  applies to a whole subtree, with no exceptions, so the paths that must stay
  unreadable (``~/.ssh`` …) are left out by granting their *siblings*
  instead, recursively along the path. ``REFER`` is handled, so a hard link
  or a rename can never carry a file into a place that grants it more than it
  had (``ln .git/config x`` fails).
* **A mount namespace** for the protected paths (``.git/hooks``,
  ``tether.yml`` …): the child makes every mount private, then bind-mounts
  each protected path that exists over itself, read-only (:func:`pins`).
  Each directory between a writable root and a protected path (``.git``),
  and the root itself, is bind-mounted over itself too, writable: a mount
  point cannot be renamed or removed (``EBUSY``), so ``mv .git x`` cannot
  carry the read-only mounts away and leave a writable ``.git`` to be made
  again. Landlock forbids a confined process every mount call, so none of it
  can be undone. A protected path that does not exist cannot be mounted on;
  :class:`~tether.shell.sandbox.ProtectedWatch` reports one that appears.
  Where namespaces are unavailable the protected paths are left out of the
  writable grant the way the unreadable ones are, siblings granted instead
  (said once in the log): then nothing can be created directly in a
  directory on the way to a protected path (the workspace's top level,
  ``.git``).
* **A network namespace** for the network (``unshare(CLONE_NEWUSER |
  CLONE_NEWNET)``): the child sees only its own loopback, which is brought
  up, and no route out; 127.0.0.1 is its own, not the host's. With the
  network ``allow-list``, the child listens on that loopback at
  :data:`~tether.shell.sandbox.PROXY_PORT` and hands the listener to tether's
  proxy (:mod:`tether.shell.proxy`), its only way out. Where user
  namespaces are unavailable (:func:`namespaces_work`), Landlock's TCP rules
  (ABI 4) cut TCP instead, and the log says once that UDP is not cut.
* ``PR_SET_NO_NEW_PRIVS``, which Landlock requires anyway: a setuid program
  cannot lift the confinement. Landlock's signal and abstract-socket scopes
  keep the child from signalling or connecting to anything outside its domain.

Why a ``preexec_fn`` rather than a helper that re-executes itself: a Python
helper costs an interpreter start per spawn (``python -I -S -c 'import
ctypes'`` takes 40-60 ms on the development machine), over the 10 ms budget.
The child's part is kept to what is safe after a fork in a threaded process:
system calls through functions bound in the parent, on a ruleset and a list
of mounts already built: three small writes to ``/proc/self``, and per
protected path an ``open``, ``fstat``, ``fstatvfs`` and two ``mount`` calls;
no import, no lock.

The confinement is inherited by every descendant and cannot be undone: a
daemon that double-forks away stays confined.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from signal import SIGKILL
from typing import NamedTuple

from tether.shell.parent_death import parent_death
from tether.shell.sandbox import PROXY_PORT, Fallback, ProtectedWatch, SandboxPolicy, identity

log = logging.getLogger(__name__)

# Landlock's access rights (linux/landlock.h).
_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
_BIND_TCP = 1 << 0  # ABI 4, network rights
_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6

_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
"""The rights a rule on a file (not a directory) may carry."""
_READ = _EXECUTE | _READ_FILE
_WRITE = (
    _WRITE_FILE
    | _REMOVE_DIR
    | _REMOVE_FILE
    | _MAKE_DIR
    | _MAKE_REG
    | _MAKE_SOCK
    | _MAKE_FIFO
    | _MAKE_SYM
    | _REFER
    | _TRUNCATE
)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom")
"""Devices every command may read and write (``> /dev/null``)."""

_SYS_CREATE_RULESET = 444  # the same number on every architecture since 5.13
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWNS = 0x00020000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_LOCKED_FLAGS = ((os.ST_NOSUID, 2), (os.ST_NODEV, 4), (os.ST_NOEXEC, 8))
"""statvfs flags and the mount flags they stand for: a read-only remount in a user
namespace must repeat them, or the kernel refuses it (they are locked)."""
_SIOCSIFFLAGS = 0x8914
_LOOPBACK_UP = struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40)  # IFF_UP|LOOPBACK|RUNNING


class SandboxUnavailableError(OSError):
    """The policy cannot be enforced here and its fallback is ``refuse``."""


class _Kernel:
    """libc's ``syscall``, ``prctl`` and ``unshare``, bound once, and the Landlock ABI."""

    def __init__(self) -> None:
        # Imported on the first confined spawn, not at start-up (a few milliseconds).
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self.get_errno = ctypes.get_errno
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        self.prctl = libc.prctl
        self.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
        self.prctl.restype = ctypes.c_int
        self.unshare = libc.unshare
        self.unshare.argtypes = [ctypes.c_int]
        self.unshare.restype = ctypes.c_int
        self.mount = libc.mount
        self.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
        self.mount.argtypes += [ctypes.c_ulong, ctypes.c_void_p]
        self.mount.restype = ctypes.c_int
        abi = self.syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
        self.abi = int(abi) if abi > 0 else 0
        self.why = "" if self.abi else os.strerror(ctypes.get_errno())

    def handled(self) -> int:
        """Every file right this kernel's ABI knows: all of them are restricted."""
        rights = _EXECUTE | _WRITE_FILE | _READ_FILE | _READ_DIR | _REMOVE_DIR | _REMOVE_FILE
        rights |= _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK
        rights |= _MAKE_SYM
        if self.abi >= 2:
            rights |= _REFER
        if self.abi >= 3:
            rights |= _TRUNCATE
        if self.abi >= 5:
            rights |= _IOCTL_DEV
        return rights

    def create_ruleset(self, *, block_tcp: bool) -> int:
        """A new ruleset restricting every file right (and TCP, with ``block_tcp``)."""
        import ctypes

        handled = self.handled()
        scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if self.abi >= 6 else 0
        tcp = _BIND_TCP | _CONNECT_TCP if block_tcp and self.abi >= 4 else 0
        attr = (
            struct.pack("QQQ", handled, tcp, scoped)
            if self.abi >= 6
            else struct.pack("QQ", handled, tcp)
        )
        if self.abi < 4:
            attr = attr[:8]
        buffer = ctypes.create_string_buffer(attr, len(attr))
        fd = self.syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            buffer,
            ctypes.c_size_t(len(attr)),
            ctypes.c_uint32(0),
        )
        if fd < 0:
            raise _errno_error("landlock_create_ruleset")
        return int(fd)

    def add_rule(self, ruleset: int, path: str, rights: int) -> None:
        """Grant ``rights`` beneath ``path`` (file rights only on a file); skip a path gone."""
        import ctypes

        try:
            target = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not stat.S_ISDIR(os.fstat(target).st_mode):
                rights &= _FILE_RIGHTS
            rights &= self.handled()
            attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, target), 12)
            done = self.syscall(
                ctypes.c_long(_SYS_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(_RULE_PATH_BENEATH),
                attr,
                ctypes.c_uint32(0),
            )
            if done < 0:
                raise _errno_error(f"landlock_add_rule {path}")
        finally:
            os.close(target)


def _errno_error(what: str) -> OSError:
    import ctypes

    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


@functools.cache
def _kernel() -> _Kernel | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _Kernel()
    except (OSError, AttributeError):
        return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none."""
    kernel = _kernel()
    return kernel.abi if kernel is not None else 0


_reported: list[str] = []


def _missing_reason() -> str:
    """Why this kernel cannot confine a process, in a few words."""
    kernel = _kernel()
    return "not Linux" if kernel is None else f"landlock_create_ruleset: {kernel.why}"


def _report_missing(fallback: Fallback) -> None:
    """Say once per process, in one line, that this kernel cannot confine processes."""
    if not _reported:
        _reported.append(_missing_reason())
        then = "commands are refused" if fallback is Fallback.REFUSE else "commands run unconfined"
        log.warning("sandbox unavailable: %s (no Landlock); %s", _reported[0], then)


def _id_maps() -> tuple[tuple[str, bytes], ...]:
    """What a child writes to map its user and group ids to themselves in its namespace."""
    uid, gid = os.geteuid(), os.getegid()
    return (
        ("/proc/self/setgroups", b"deny"),
        ("/proc/self/uid_map", f"{uid} {uid} 1".encode()),
        ("/proc/self/gid_map", f"{gid} {gid} 1".encode()),
    )


def _enter_namespaces(
    kernel: _Kernel, maps: tuple[tuple[str, bytes], ...], *, network: bool, mounts: bool
) -> None:
    """In a child: a user namespace with the ids mapped, an empty network namespace with
    its loopback up (``network``), a mount namespace whose mounts are private (``mounts``).

    Raises:
        OSError: a step was refused (user namespaces disabled or restricted).
    """
    flags = _CLONE_NEWUSER | (_CLONE_NEWNET if network else 0) | (_CLONE_NEWNS if mounts else 0)
    if kernel.unshare(flags) != 0:
        raise OSError(kernel.get_errno(), "unshare")
    for path, line in maps:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    if network:
        _loopback_up()
    if mounts and kernel.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(kernel.get_errno(), "mount --make-rprivate /")


@functools.cache
def namespaces_work() -> bool:
    """Whether a child may enter its own user, network and mount namespaces here
    (probed once).

    Some systems disable unprivileged user namespaces, or let them be created
    but not used (an AppArmor restriction); then the network is cut by
    Landlock instead, which covers TCP only, and the protected paths are kept
    read-only by granting their siblings (both said once in the log).
    """
    kernel = _kernel()
    if kernel is None:
        return False
    maps = _id_maps()

    def enter() -> None:
        try:
            _enter_namespaces(kernel, maps, network=True, mounts=True)
        except OSError:
            os._exit(126)

    try:
        probe = subprocess.run(
            ["true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=enter,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if probe.returncode != 0:
        log.warning(
            "sandbox: no user namespaces here; with the network off, Landlock blocks "
            "TCP only (UDP and DNS are not blocked); protected paths are kept read-only "
            "by granting their siblings instead of the workspace, so nothing can be "
            "created directly in the workspace's top level or .git"
        )
    return probe.returncode == 0


class Pin(NamedTuple):
    """One bind mount of a path over itself, made in the child's mount namespace."""

    path: bytes
    device: int
    inode: int
    """The identity the parent saw: the child mounts only what is still the same file."""
    readonly: bool


class Confinement:
    """A policy ready to apply in a child: a built ruleset, the mounts, how to enter them.

    Made by :func:`prepare` in the parent; :meth:`preexec` is the child's part.
    :meth:`close` releases the ruleset once the child has been created.
    """

    def __init__(
        self,
        kernel: _Kernel,
        ruleset: int,
        *,
        isolate: bool,
        pinned: tuple[Pin, ...],
        proxy: bytes | None = None,
    ) -> None:
        self._kernel = kernel
        self._ruleset = ruleset
        self._isolate = isolate
        self._pinned = pinned
        self._maps = _id_maps()
        self._proxy = proxy if isolate else None

    def preexec(self, parent: int | None) -> Callable[[], None]:
        """The child's part, run between fork and exec: no new privileges, the user,
        network and mount namespaces, the proxy's listener handed over (``allow-list``),
        the protected paths mounted read-only, the parent-death signal (when
        ``parent`` is given), then Landlock.

        A step that fails ends the child with status 126 and the reason on its stderr:
        nothing runs half-confined.
        """
        import ctypes

        kernel, ruleset, isolate, maps = self._kernel, self._ruleset, self._isolate, self._maps
        pinned, proxy = self._pinned, self._proxy

        def enter() -> None:
            step = "no_new_privs"
            try:
                if kernel.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                    raise OSError(ctypes.get_errno(), step)
                if isolate or pinned:
                    step = "namespaces"
                    _enter_namespaces(kernel, maps, network=isolate, mounts=bool(pinned))
                if proxy is not None:
                    step = "proxy handover"
                    _hand_over(proxy)
                for pin in pinned:
                    step = f"mount {pin.path.decode(errors='replace')}"
                    _mount(kernel, pin)
                if pinned:
                    # The working directory was entered before the mounts: enter it again
                    # through them, or a relative path would pass beneath them.
                    step = "chdir"
                    os.chdir(os.getcwd())
                if parent is not None:
                    step = "pdeathsig"
                    kernel.prctl(_PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
                    if os.getppid() != parent:
                        os._exit(125)
                step = "landlock_restrict_self"
                done = kernel.syscall(
                    ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)
                )
                if done != 0:
                    raise OSError(ctypes.get_errno(), step)
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                os.write(2, f"tether sandbox: {step} failed: {reason}\n".encode())
                os._exit(126)

        return enter

    def close(self) -> None:
        os.close(self._ruleset)


def _mount(kernel: _Kernel, pin: Pin) -> None:
    """In a child: bind-mount ``pin`` over itself, then make it read-only if it asks.

    The path is opened without following a final link and compared with what
    the parent saw, and the bind is made through that descriptor: a path
    swapped for another file or a link meanwhile is refused, not mounted.

    Raises:
        OSError: the path changed, or a mount was refused.
    """
    fd = os.open(pin.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _same(fd, pin)
        here = b"/proc/self/fd/%d" % fd
        # A writable bind takes the mounts beneath along (a volume in the workspace stays
        # in view); a read-only one does not, so nothing beneath it is left writable.
        rec = 0 if pin.readonly else _MS_REC
        if kernel.mount(here, here, None, _MS_BIND | rec, None) != 0:
            raise OSError(kernel.get_errno(), "bind")
        if not pin.readonly:
            return
        held = os.fstatvfs(fd).f_flag
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY
        flags |= sum(bit for kept, bit in _LOCKED_FLAGS if held & kept)
        if kernel.mount(None, pin.path, None, flags, None) != 0:
            raise OSError(kernel.get_errno(), "read-only remount")
    finally:
        os.close(fd)
    # The remount named the path again: check that it made that very file read-only.
    fd = os.open(pin.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _same(fd, pin)
        if not os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            raise OSError(errno.EPERM, "still writable")
    finally:
        os.close(fd)


def _same(fd: int, pin: Pin) -> None:
    seen = os.fstat(fd)
    if (seen.st_dev, seen.st_ino) != (pin.device, pin.inode):
        raise OSError(errno.ESTALE, "replaced while the command started")


def _hand_over(control: bytes) -> None:
    """In a child, in its own network namespace: listen on its loopback at the proxy's
    port, and hand the listener and a pidfd of itself to tether's proxy (``control``).

    The listener stays in this namespace wherever its descriptor goes: the proxy
    accepts this process's connections on it. Both descriptors are close-on-exec
    here, so the command holds neither.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", PROXY_PORT))
        listener.listen(128)
        pidfd = os.pidfd_open(os.getpid())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as channel:
                channel.connect(control)
                socket.send_fds(channel, [b"L"], [listener.fileno(), pidfd])
        finally:
            os.close(pidfd)


def _loopback_up() -> None:
    """Bring up the namespace's own loopback, so a command can serve itself on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        fcntl.ioctl(probe.fileno(), _SIOCSIFFLAGS, _LOOPBACK_UP)


def prepare(
    policy: SandboxPolicy | None, watch: ProtectedWatch | None = None
) -> Confinement | None:
    """Build the confinement of ``policy`` in this process; ``None`` when nothing is confined
    (no policy, ``full-access``, or no Landlock with the ``warn`` fallback, said once).

    ``watch`` is what stands at the protected paths (taken now when not given):
    those that exist are mounted read-only.

    Raises:
        SandboxUnavailableError: no Landlock here, and the fallback is ``refuse``.
        OSError: the ruleset could not be built (out of descriptors, …).
    """
    if policy is None or not policy.confined:
        return None
    kernel = _kernel()
    if kernel is None or kernel.abi < 1:
        _report_missing(policy.fallback)
        if policy.fallback is Fallback.REFUSE:
            raise SandboxUnavailableError(
                errno.ENOSYS,
                f"the sandbox cannot be enforced here ({_missing_reason()}); fallback is refuse",
            )
        return None
    namespaces = namespaces_work()
    isolate = not policy.network and namespaces
    pinned: tuple[Pin, ...] = ()
    if namespaces:
        pinned = pins(policy, (watch or ProtectedWatch.of(policy)).existing())
    ruleset = kernel.create_ruleset(block_tcp=not policy.network and not isolate)
    try:
        for path, rights in rules(policy, mounts=namespaces):
            kernel.add_rule(ruleset, path, rights)
    except BaseException:
        os.close(ruleset)
        raise
    proxy = None
    if policy.allow_list and policy.proxy is not None:
        if not isolate:
            _report_no_proxy()
        proxy = os.fsencode(policy.proxy)
    return Confinement(kernel, ruleset, isolate=isolate, pinned=pinned, proxy=proxy)


@functools.cache
def _report_no_proxy() -> None:
    """Say once that ``allow-list`` needs a network namespace, and is ``off`` without one."""
    log.warning(
        "sandbox: network allow-list needs user namespaces, unavailable here; "
        "the network is off for confined commands (the proxy cannot be reached)"
    )


def pins(policy: SandboxPolicy, existing: Mapping[str, tuple[int, int, int]]) -> tuple[Pin, ...]:
    """The bind mounts that keep the ``existing`` protected paths of ``policy`` read-only.

    Each protected path that is not a link is mounted read-only; before it,
    its writable root and every directory between them are mounted over
    themselves writable, so that none of them can be renamed. Outermost first:
    each path is opened through the mounts made before it. A protected path
    reached through a link is left out (the link's target is governed by
    where it is); one that is unreadable is not granted at all.
    """
    chosen: dict[str, tuple[tuple[int, int, int], bool]] = {}
    for path, found in existing.items():
        root = next((r for r in policy.writable if path.startswith(_slash(r))), None)
        if root is None or path in policy.unreadable or found[2] == stat.S_IFLNK:
            continue
        parts = path[len(root) :].strip("/").split("/")[:-1]
        chain = [root, *(os.path.join(root, *parts[: n + 1]) for n in range(len(parts)))]
        seen = [identity(directory) for directory in chain]
        if any(s is None or s[2] != stat.S_IFDIR for s in seen):
            continue
        for directory, directory_identity in zip(chain, seen, strict=True):
            assert directory_identity is not None
            chosen.setdefault(directory, (directory_identity, False))
        chosen[path] = (found, True)
    ordered = sorted(chosen, key=lambda path: (path.count("/"), path))
    return tuple(
        Pin(os.fsencode(path), chosen[path][0][0], chosen[path][0][1], chosen[path][1])
        for path in ordered
    )


def rules(policy: SandboxPolicy, *, mounts: bool = True) -> Iterator[tuple[str, int]]:
    """The (path, rights) rules of ``policy``: what is granted, and beneath where.

    Each writable root is granted whole but for its unreadable paths; without
    ``mounts`` (no mount namespace to keep them read-only) its protected paths
    are left out too. Building them only lists directories; nothing is opened
    for a rule here.
    """
    yield "/", _READ_DIR
    for path in split("/", policy.unreadable):
        yield path, _READ
    for device in _DEVICES:
        yield device, _READ_FILE | _WRITE_FILE | _TRUNCATE | _IOCTL_DEV
    unreadable = set(policy.unreadable)
    kept = policy.protected if not mounts else tuple(p for p in policy.protected if p in unreadable)
    for root in policy.writable:
        for path in split(root, kept):
            yield path, _WRITE | _READ | _READ_DIR


def split(root: str, excluded: tuple[str, ...]) -> Iterator[str]:
    """The paths beneath ``root`` to grant so that everything but ``excluded`` is covered.

    ``root`` itself when nothing excluded lies beneath it; else each entry of
    ``root``, recursively, leaving out the excluded ones (and ``root`` itself,
    which is not granted). Symlinks are left out: a rule on one would follow
    it, and a path through a link is governed by where it leads.
    """
    inside = [path for path in excluded if path == root or path.startswith(_slash(root))]
    if not inside:
        yield root
        return
    if root in inside:
        return
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if not entry.is_symlink():
            yield from split(entry.path, tuple(inside))


def _slash(path: str) -> str:
    return path if path.endswith("/") else path + "/"


class Spawn(NamedTuple):
    """How to start one child under a policy: an argv prefix, a ``preexec_fn``, and the record."""

    prefix: list[str]
    preexec: Callable[[], None] | None
    record: str | None
    """What was applied, in one line (``None`` when no policy was asked for)."""
    watch: ProtectedWatch | None = None
    """The protected paths as they were before the child started (confined children)."""


@contextlib.contextmanager
def confined_spawn(policy: SandboxPolicy | None, parent: int) -> Iterator[Spawn]:
    """The way to start a child under ``policy`` that dies with ``parent``; spawn inside the block.

    Without a confinement it is :func:`~tether.shell.parent_death.parent_death`'s
    way; with one, the parent-death signal is armed by the confinement's
    ``preexec_fn`` too. The ruleset is released when the block ends.

    Raises:
        SandboxUnavailableError: the policy cannot be enforced and its fallback is ``refuse``.
        OSError: the ruleset could not be built.
    """
    watch = ProtectedWatch.of(policy) if policy is not None and policy.confined else None
    confinement = prepare(policy, watch)
    if confinement is None:
        prefix, preexec = parent_death(parent)
        record = None
        if policy is not None:
            record = policy.summary() if not policy.confined else "unconfined: no Landlock here"
        yield Spawn(prefix, preexec, record)
        return
    assert policy is not None
    try:
        yield Spawn([], confinement.preexec(parent), policy.summary(), watch)
    finally:
        confinement.close()
