"""The sandbox policy: what a process tether starts for an agent may write, read and reach.

A :class:`SandboxPolicy` is a frozen value built for one workspace from the
:class:`SandboxSettings` (``tether.yml``'s ``sandbox`` row, ``--sandbox``):

* **mode** — ``read-only`` (nothing is writable but the private temp dir and
  the harmless devices), ``workspace-write`` (the workspace, the configured
  extra roots and the private temp dir are writable; the default), or
  ``full-access`` (no sandbox at all);
* **protected paths** — read-only even inside a writable root: the git hooks
  and config (a planted hook or ``core.hooksPath`` runs later, outside any
  sandbox) and the settings and hook files of tether and of the other
  harnesses a user may run on the same checkout (:data:`PROTECTED`);
* **unreadable paths** — the user's keys and credentials (:data:`UNREADABLE`),
  unreadable everywhere;
* **network** — ``off`` (the default), ``on``, or ``allow-list``: no direct
  network, but the hosts of ``allowed_hosts`` through tether's own proxy
  (:mod:`tether.shell.proxy`).

:meth:`SandboxPolicy.may_write` and :meth:`SandboxPolicy.may_read` answer
for a *real* path (every symlink resolved) with the rules the kernel applies
to a confined process (:mod:`tether.shell.confinement`), so the file tools,
which run in tether's own process, obey the same policy in-process. They are
stricter in one case: a protected path that does not exist is refused to a
file tool, while a command can create it (no mount can cover it) and is
reported for it.

:class:`ProtectedWatch` notes what stood at each protected path when a
command started, so that a protected path the command *created* (which no
mount can keep read-only, since it did not exist) is reported when it ends.

This module is pure policy: it starts nothing and makes no system call but
path resolution and ``lstat``.
"""

from __future__ import annotations

import enum
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from tether.runtime.keys import ServiceKey
from tether.runtime.schema import FieldError, Schema
from tether.session.settings import SANDBOX_OPTION

if TYPE_CHECKING:
    # Imported where first needed: start-up stays free of the proxy.
    from tether.shell.proxy import NetworkProxy


class SandboxMode(enum.StrEnum):
    """The three modes, named as users of other harnesses know them."""

    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    FULL_ACCESS = "full-access"


class Network(enum.StrEnum):
    """What a confined process may reach (``true``/``false`` are read as ``on``/``off``)."""

    OFF = "off"
    ON = "on"
    ALLOW_LIST = "allow-list"
    """Only ``allowed_hosts``, through tether's proxy; no direct connection."""


class Fallback(enum.StrEnum):
    """What happens where the kernel cannot confine a process (no Landlock)."""

    REFUSE = "refuse"
    """Commands are not run; the call fails with the reason."""
    WARN = "warn"
    """Commands run unconfined; the lack is logged once."""


PROTECTED: tuple[str, ...] = (
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/modules",
    "tether.yml",
    ".tether",
    ".claude",
    ".codex",
    ".gemini",
    ".cursor",
    ".mcp.json",
    ".vscode",
    ".idea",
)
"""Paths relative to a writable root that stay read-only: git's hooks and config (the
submodules' too, under ``.git/modules``), and the settings and hook files of tether and
of the harnesses a user may also run."""

UNREADABLE: tuple[str, ...] = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.config/gcloud",
    "~/.password-store",
)
"""Keys and credentials of the user, unreadable by a confined process."""


PROXY_PORT = 3128
"""The port tether's proxy listens on inside each confined process's own loopback
(``network: allow-list``; see :mod:`tether.shell.proxy`)."""
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
"""The variables naming tether's proxy to a process under ``network: allow-list``."""
NO_PROXY = "localhost,127.0.0.1,::1"
"""The process's own loopback is reached directly (it is its own, not the host's)."""

AGENT_SOCKETS: frozenset[str] = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "SSH_AGENT_PID"})
"""Variables naming a key agent's socket, left out of a confined process's environment."""


class SandboxSettings(Schema, frozen=True):
    """The ``sandbox`` settings (``tether.yml``, ``--sandbox``; see ``docs/security.md``)."""

    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE
    """``read-only``, ``workspace-write`` or ``full-access``."""
    network: bool | Network = Network.OFF
    """``off``, ``on`` (``false``/``true`` too) or ``allow-list``."""
    allowed_hosts: tuple[str, ...] = ()
    """With ``network: allow-list``: the hosts reached through tether's proxy
    (``pypi.org``, ``*.npmjs.org``, ``host:8443``; ports 80 and 443 unless given)."""
    writable_roots: tuple[str, ...] = ()
    """Absolute directories writable besides the workspace (``~`` expands)."""
    protected: tuple[str, ...] = ()
    """Paths relative to each writable root kept read-only, besides :data:`PROTECTED`."""
    unreadable: tuple[str, ...] = ()
    """Absolute paths (``~`` expands) unreadable, besides :data:`UNREADABLE`."""
    fallback: Fallback = Fallback.WARN
    """Where the kernel has no Landlock: ``refuse`` to run, or ``warn`` once and run."""
    mcp_network: bool = True
    """Whether MCP stdio servers may reach the network (many exist to do just that);
    their files are confined like any command's."""

    @property
    def network_access(self) -> Network:
        """:attr:`network` as a :class:`Network` (a boolean read as ``on``/``off``)."""
        if isinstance(self.network, Network):
            return self.network
        return Network.ON if self.network else Network.OFF

    def __post_init__(self) -> None:
        if self.allowed_hosts:
            from tether.shell.proxy import HostRule
        for index, host in enumerate(self.allowed_hosts):
            try:
                HostRule.parse(host)
            except ValueError as exc:
                raise FieldError(("allowed_hosts", index), str(exc)) from None
        for index, root in enumerate(self.writable_roots):
            if not os.path.isabs(os.path.expanduser(root)):
                raise FieldError(("writable_roots", index), f"must be absolute, got {root!r}")
        for index, path in enumerate(self.unreadable):
            if not os.path.isabs(os.path.expanduser(path)):
                raise FieldError(("unreadable", index), f"must be absolute, got {path!r}")
        for index, relative in enumerate(self.protected):
            if os.path.isabs(relative) or ".." in relative.split("/"):
                raise FieldError(("protected", index), f"must be relative, got {relative!r}")


class SandboxPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The policy of one process, every path absolute and real.

    Build it with :meth:`for_workspace`. ``writable`` lists the roots a
    process may write beneath (empty in ``read-only`` mode but for the temp
    dir); ``protected`` the absolute paths inside them that stay read-only;
    ``unreadable`` the paths no confined process may read.
    """

    mode: SandboxMode
    workspace: str
    writable: tuple[str, ...]
    protected: tuple[str, ...]
    unreadable: tuple[str, ...]
    network: bool
    temp_dir: str | None
    fallback: Fallback
    allowed_hosts: tuple[str, ...] = ()
    """With ``network: allow-list``: what tether's proxy lets the process reach."""
    proxy: str | None = None
    """The control socket of tether's proxy (``allow-list``), once the proxy runs."""

    @classmethod
    def for_workspace(
        cls, settings: SandboxSettings, workspace: str, temp_dir: str | None = None
    ) -> SandboxPolicy:
        """The policy for a process working in ``workspace`` with private ``temp_dir``.

        The workspace and the extra roots are writable in ``workspace-write``
        mode; the temp dir in every confined mode.
        """
        real = os.path.realpath(workspace)
        access = settings.network_access
        roots: list[str] = []
        if settings.mode is SandboxMode.WORKSPACE_WRITE:
            roots = [real, *(_real(root) for root in settings.writable_roots)]
        temp = os.path.realpath(temp_dir) if temp_dir is not None else None
        if temp is not None:
            roots.append(temp)
        roots = _unique(roots)
        relative = (*PROTECTED, *settings.protected)
        unreadable = _unique(_real(path) for path in (*UNREADABLE, *settings.unreadable))
        # What may not be read may not be written either (~/.ssh/authorized_keys).
        protected = _unique(
            [
                *(os.path.join(root, name) for root in roots if root != temp for name in relative),
                *(path for path in unreadable if any(_beneath(path, root) for root in roots)),
            ]
        )
        return cls(
            mode=settings.mode,
            workspace=real,
            writable=tuple(roots),
            protected=tuple(protected),
            unreadable=tuple(unreadable),
            network=access is Network.ON or settings.mode is SandboxMode.FULL_ACCESS,
            temp_dir=temp,
            fallback=settings.fallback,
            allowed_hosts=settings.allowed_hosts if access is Network.ALLOW_LIST else (),
        )

    @property
    def confined(self) -> bool:
        """False in ``full-access`` mode: nothing is restricted."""
        return self.mode is not SandboxMode.FULL_ACCESS

    @property
    def allow_list(self) -> bool:
        """Whether the process reaches the network only through tether's proxy."""
        return self.proxy is not None and self.confined and not self.network

    def summary(self) -> str:
        """One line for a record or a log: the mode, the network, the writable roots."""
        if not self.confined:
            return "sandbox full-access"
        network = "network on" if self.network else "network off"
        if self.allow_list:
            network = f"network allow-list: {', '.join(self.allowed_hosts) or 'no host'}"
        writable = ", ".join(self.writable) or "nothing"
        return f"sandbox {self.mode} ({network}; writable: {writable})"

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` for a confined process: ``TMPDIR`` is the private temp dir, and the
        agent sockets (:data:`AGENT_SOCKETS`) are not named."""
        if not self.confined:
            return dict(env)
        confined = {name: value for name, value in env.items() if name not in AGENT_SOCKETS}
        if self.temp_dir is not None:
            confined["TMPDIR"] = self.temp_dir
        if self.allow_list:
            for name in PROXY_VARIABLES:
                confined[name] = PROXY_URL
            confined["NO_PROXY"] = confined["no_proxy"] = NO_PROXY
        return confined

    def may_write(self, real: str) -> bool:
        """Whether a confined process may write (create, change, remove) the real path ``real``."""
        if not self.confined:
            return True
        if not any(_beneath(real, root) for root in self.writable):
            return False
        return not any(_beneath(real, path) for path in self.protected)

    def may_read(self, real: str) -> bool:
        """Whether a confined process may read the real path ``real``."""
        if not self.confined:
            return True
        return not any(_beneath(real, path) for path in self.unreadable)

    def refusal(self, real: str, *, write: bool, outside_writes: bool = False) -> str | None:
        """Why the policy denies the access to the real path ``real``, or ``None``.

        With ``outside_writes`` a write outside the writable roots is left to
        the caller's own rule (the file tools' ``outside_workspace``), unless
        the mode is ``read-only``; protected paths are refused either way.
        """
        if write and not self.may_write(real):
            if any(_beneath(real, path) for path in self.protected):
                return f"{real} is protected by the sandbox ({self.mode}): read-only"
            if self.mode is SandboxMode.READ_ONLY:
                return f"{real} is not writable: the sandbox is read-only"
            if not outside_writes:
                return f"{real} is outside the sandbox's writable roots ({self.mode})"
        if not self.may_read(real):
            return f"{real} is unreadable in the sandbox (keys and credentials)"
        return None


class PrivateTemp:
    """Private temp dirs (0700), one per owner, under one root made on first use and
    removed by :meth:`remove`."""

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent
        self._root: str | None = None

    def for_owner(self, owner: str | None) -> str:
        """The temp dir of ``owner`` (created on first use, mode 0700)."""
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix="tether-sandbox-", dir=self._parent)
        name = hashlib.sha256((owner or "").encode()).hexdigest()[:16]
        path = os.path.join(self._root, name)
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def remove(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


class ProtectedWatch(msgspec.Struct, frozen=True):
    """What stood at each protected path of a policy at one moment: its identity
    (device, inode, file type), or ``None`` where nothing did.

    Take it with :meth:`of` before a command starts; :meth:`appeared` after it
    ends names the protected paths that hold something new: created, or
    replaced by another file (a directory moved aside and made again, a link).
    A path that was there and is gone is not named: a protected path that
    existed is a read-only mount point, which cannot be removed or renamed.
    """

    seen: tuple[tuple[str, tuple[int, int, int] | None], ...]

    @classmethod
    def of(cls, policy: SandboxPolicy) -> ProtectedWatch:
        """The identities of ``policy``'s protected paths now."""
        return cls(tuple((path, identity(path)) for path in policy.protected))

    def existing(self) -> dict[str, tuple[int, int, int]]:
        """The protected paths that existed, with their identities."""
        return {path: seen for path, seen in self.seen if seen is not None}

    def appeared(self) -> tuple[str, ...]:
        """The protected paths that hold now what they did not hold when this was taken."""
        return tuple(
            path
            for path, before in self.seen
            if (now := identity(path)) is not None and now != before
        )


def identity(path: str) -> tuple[int, int, int] | None:
    """What stands at ``path`` (device, inode, file type), a final link not followed."""
    try:
        seen = os.lstat(path)
    except OSError:
        return None
    return (seen.st_dev, seen.st_ino, stat.S_IFMT(seen.st_mode))


def appeared_note(paths: tuple[str, ...]) -> str | None:
    """The note for the model and the log when a confined command made protected ``paths``."""
    if not paths:
        return None
    return (
        f"[sandbox: protected paths appeared while the command ran: {', '.join(paths)}. They "
        "did not exist when it started, so the sandbox could not keep them read-only; they "
        "were left in place. A person should check them before they take effect (git "
        "hooks and config, agent settings).]"
    )


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


DENIALS: tuple[str, ...] = (
    "Permission denied",
    "Operation not permitted",
    "Invalid cross-device link",
    "Read-only file system",
    "Device or resource busy",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Could not resolve host",
)
"""What a denied access looks like in a command's output (EACCES, EPERM, EXDEV for a
refused link or rename, EROFS for a protected path, EBUSY for moving one, no route, no
resolver)."""


DENIED = ": the command was denied an access ("
REFUSED = ": the network proxy refused "


def denial_note(record: str | None, output: str) -> str | None:
    """A note for a person and the model when ``output`` shows a denied access and the
    command ran confined (``record`` is its :attr:`ShellResult.sandbox`); else ``None``."""
    if record is None or not record.startswith("sandbox ") or "full-access" in record:
        return None
    seen = [marker for marker in DENIALS if marker in output]
    if not seen:
        return None
    return (
        f"[{record}{DENIED}{'; '.join(seen)}). Outside the "
        "writable roots, protected paths (.git/hooks, .git/config, agent settings) and "
        "key stores are read-only or unreadable, and a protected path cannot be moved or "
        "removed; the network is off unless allowed.]"
    )


def refused_note(record: str | None, refused: tuple[str, ...]) -> str | None:
    """A note for a person and the model naming the hosts tether's proxy ``refused`` to a
    command confined with ``network: allow-list`` (``record`` is its policy line)."""
    if not refused:
        return None
    policy = record or "sandbox"
    return (
        f"[{policy}{REFUSED}{', '.join(refused)}: not in allowed_hosts. "
        "Only the allowed hosts are reached, through tether's proxy; nothing else is.]"
    )


def denials_in(result: str) -> tuple[str, ...]:
    """The notes of :func:`denial_note` and :func:`refused_note` a tool's result ends
    with, without their brackets: the sandbox's notes are the result's last lines,
    after the output and its exit status."""
    notes = []
    for line in reversed(result.splitlines()):
        if not (line.startswith("[sandbox") and line.endswith("]")):
            break
        if DENIED in line or REFUSED in line:
            notes.append(line[1:-1])
    return tuple(reversed(notes))


class Sandbox:
    """The ``sandbox`` service: the settings, and a private temp dir per owner.

    :meth:`policy_for` builds the policy a process started for an agent runs
    under, starting the allow-list proxy (:mod:`tether.shell.proxy`) the first
    time one needs it; :meth:`aclose` stops the proxy and removes the temp
    dirs (:meth:`close` does it without waiting for the proxy's connections).
    ``resolve`` maps host names for the proxy (tests point names at 127.0.0.1).
    """

    def __init__(
        self,
        settings: SandboxSettings,
        temp_parent: str | None = None,
        resolve: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings
        self._temp = PrivateTemp(temp_parent)
        self._resolve = resolve
        self._proxy: NetworkProxy | None = None

    def mode_for(self, options: Mapping[str, str] | None = None) -> SandboxMode:
        """The mode of a session whose ``session/config`` options are ``options``: the
        one it set (:data:`~tether.session.settings.SANDBOX_OPTION`), else the setting's."""
        chosen = (options or {}).get(SANDBOX_OPTION)
        try:
            return self.settings.mode if chosen is None else SandboxMode(chosen)
        except ValueError:
            return self.settings.mode

    def network_summary(self, options: Mapping[str, str] | None = None) -> str:
        """The network of a session's processes in a few words (``network off`` …), for
        the mode its ``options`` set (``full-access``: ``network on``)."""
        if self.mode_for(options) is SandboxMode.FULL_ACCESS:
            return "network on"
        access = self.settings.network_access
        if access is Network.ALLOW_LIST:
            return f"network allow-list: {', '.join(self.settings.allowed_hosts) or 'no host'}"
        return f"network {access}"

    def policy_for(
        self,
        workspace: str,
        owner: str | None,
        options: Mapping[str, str] | None = None,
        *,
        spawn: bool = True,
    ) -> SandboxPolicy:
        """The policy of a command working for ``owner`` in ``workspace``, in the mode its
        session's ``options`` set (:meth:`mode_for`).

        With ``spawn`` (a process is about to start) and the network ``allow-list``, the
        proxy is started and named in the policy: then call it from the event loop's
        thread, where the proxy lives. Without ``spawn`` (the file tools, which check
        paths only, maybe from a worker thread) nothing is started."""
        settings = self.settings
        mode = self.mode_for(options)
        if mode is not settings.mode:
            settings = msgspec.structs.replace(settings, mode=mode)
        temp = self._temp.for_owner(owner) if mode is not SandboxMode.FULL_ACCESS else None
        policy = SandboxPolicy.for_workspace(settings, workspace, temp)
        if spawn and policy.confined and self.settings.network_access is Network.ALLOW_LIST:
            proxy = self._proxy_for(policy.allowed_hosts)
            policy = msgspec.structs.replace(policy, proxy=proxy.control_path(owner))
        return policy

    def refused(self, owner: str | None) -> tuple[str, ...]:
        """The hosts the proxy refused to ``owner``'s processes since last asked."""
        return self._proxy.refused(owner) if self._proxy is not None else ()

    def _proxy_for(self, hosts: tuple[str, ...]) -> NetworkProxy:
        from tether.shell.proxy import HostRule, NetworkProxy

        rules = tuple(HostRule.parse(host) for host in hosts)
        if self._proxy is not None and self._proxy.rules != rules:
            self._proxy.rules = rules
        if self._proxy is None:
            self._proxy = NetworkProxy(rules, self._resolve)
        return self._proxy

    def server_policy(
        self, workspace: str, owner: str | None, options: Mapping[str, str] | None = None
    ) -> SandboxPolicy:
        """The policy of an MCP stdio server: a command's, with the network of ``mcp_network``."""
        policy = self.policy_for(workspace, owner, options)
        if self.settings.mcp_network and not policy.network:
            return msgspec.structs.replace(policy, network=True, proxy=None, allowed_hosts=())
        return policy

    def close(self) -> None:
        """Remove the temp dirs; stop the proxy, its connections cancelled but not awaited."""
        if self._proxy is not None:
            self._proxy.shut()
            self._proxy = None
        self._temp.remove()

    async def aclose(self) -> None:
        """Stop the proxy and wait for its connections to end; remove the temp dirs."""
        if self._proxy is not None:
            proxy, self._proxy = self._proxy, None
            await proxy.close()
        self._temp.remove()


SANDBOX = ServiceKey[Sandbox]("sandbox")
"""``ctx.sandbox``: the sandbox settings and policies (a :class:`Sandbox`)."""
