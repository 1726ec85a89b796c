"""The network allow-list: an HTTP(S) proxy tether owns, the only way out of a confined process.

With ``sandbox.network: allow-list`` a confined process has its own, empty
network namespace (as with the network off) and one way out: a proxy in
tether's own process that forwards to the hosts of ``allowed_hosts`` and
refuses every other with ``403 Forbidden``. HTTPS goes through ``CONNECT``
(a tunnel: the proxy sees the host and port, never the content); plain HTTP
is forwarded (absolute-form request, rewritten to origin-form). Names are
resolved here, outside the namespace, so the process needs no resolver.

How a process in an empty namespace reaches a proxy outside it: between
fork and exec, the child (:mod:`tether.shell.confinement`) listens on
127.0.0.1 at :data:`~tether.shell.sandbox.PROXY_PORT` *inside its
namespace*, and hands that listening socket, with a pidfd of itself, to the
proxy over the owner's control socket (a Unix socket, ``SCM_RIGHTS``). A
socket belongs to the namespace it was made in wherever its descriptor goes:
the proxy accepts the process's connections on it from tether's event loop, and connects out from
tether's namespace. No relay process, no thread. When the process ends (its
pidfd turns readable) the listener is closed; connections already open run
until either side closes them.

Each refusal is logged and kept for its owner until :meth:`NetworkProxy.refused`
takes it (the bash tool adds it to the tool result, beside the sandbox's other
denial notes).

Ownership: the :class:`~tether.shell.sandbox.Sandbox` service makes the
proxy on the first policy that needs it; :meth:`NetworkProxy.close` (run when
the ``sandbox`` plugin unloads) stops listening, cancels every connection and
awaits it, and removes the control sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

DEFAULT_PORTS = frozenset({80, 443})
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 15.0
_DROPPED = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"host")
"""Request headers not forwarded: the proxy's own, and ``Host``, which is set to the
host checked (a request for an allowed host cannot name another to the server)."""


class HostRule(NamedTuple):
    """One entry of ``allowed_hosts``: a name (``pypi.org``) or a suffix (``*.npmjs.org``),
    and the ports allowed to it (80 and 443 unless one is given: ``host:8443``)."""

    name: str
    suffix: bool
    ports: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> HostRule:
        """The rule written ``text``.

        Raises:
            ValueError: not a host name, ``*.`` suffix, or ``name:port``.
        """
        written = text.strip().lower()
        host, colon, port = written.rpartition(":")
        if not colon:
            host, port = written, ""
        host = host.rstrip(".")
        ports = DEFAULT_PORTS
        if port:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bad port in {text!r}")
            ports = frozenset({int(port)})
        suffix = host.startswith("*.")
        name = host[2:] if suffix else host
        if not name or "*" in name or "/" in name or any(c.isspace() for c in name):
            raise ValueError(f"not a host name or '*.suffix': {text!r}")
        return cls(name, suffix, ports)

    def allows(self, host: str, port: int) -> bool:
        """Whether this rule lets ``host`` (lower case, no final dot) be reached on ``port``."""
        if port not in self.ports:
            return False
        if self.suffix:
            return host.endswith("." + self.name)
        return host == self.name


def allowed(rules: tuple[HostRule, ...], host: str, port: int) -> bool:
    """Whether any of ``rules`` lets ``host`` be reached on ``port``."""
    name = host.lower().rstrip(".")
    return any(rule.allows(name, port) for rule in rules)


class Request(NamedTuple):
    """What a client asked the proxy for: where, and the head to send there (plain HTTP)."""

    host: str
    port: int
    tunnel: bool
    head: bytes


def parse_head(head: bytes) -> Request:
    """The target of a request head (``CONNECT host:port`` or ``GET http://host/…``).

    Raises:
        ValueError: not a proxy request (no absolute ``http://`` URL, no port).
    """
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3:
        raise ValueError("malformed request line")
    method, target, version = parts
    if method.upper() == "CONNECT":
        host, _, port = target.rpartition(":")
        if not port.isdigit():
            raise ValueError("CONNECT needs host:port")
        return Request(host.strip("[]"), int(port), True, b"")
    url = urlsplit(target)
    if url.scheme.lower() != "http" or not url.hostname:
        raise ValueError("only absolute http:// URLs are forwarded (https goes through CONNECT)")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [
        header
        for header in rest.split(b"\r\n")
        if header and header.split(b":", 1)[0].strip().lower() not in _DROPPED
    ]
    host = url.hostname if url.port is None else f"{url.hostname}:{url.port}"
    lines = [
        f"{method} {path} {version}".encode("latin-1"),
        f"Host: {host}".encode("latin-1"),
        *kept,
        b"Connection: close",
    ]
    return Request(url.hostname, url.port or 80, False, b"\r\n".join(lines) + b"\r\n\r\n")


class _Lease(NamedTuple):
    """One confined process served: its listener (in its namespace) and its pidfd."""

    owner: str
    listener: socket.socket
    pidfd: int


class NetworkProxy:
    """The allow-list proxy of one :class:`~tether.shell.sandbox.Sandbox`.

    ``resolve`` maps a host name to the address connected to (the name
    itself by default: the system resolver); tests map names to 127.0.0.1.
    Must be used from the event loop's thread.
    """

    def __init__(
        self, rules: tuple[HostRule, ...], resolve: Callable[[str], str] | None = None
    ) -> None:
        self.rules = rules
        self._resolve = resolve or (lambda host: host)
        self._loop = asyncio.get_running_loop()
        self._directory = tempfile.mkdtemp(prefix="tether-proxy-")
        self._controls: dict[str, socket.socket] = {}
        self._leases: dict[int, _Lease] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._refused: dict[str, list[str]] = {}
        self._closed = False

    def control_path(self, owner: str | None) -> str:
        """The Unix socket a child of ``owner`` hands its listener to (bound on first use)."""
        key = owner or ""
        control = self._controls.get(key)
        if control is None:
            if self._closed:
                raise RuntimeError("the network proxy is closed")
            path = os.path.join(self._directory, f"{len(self._controls)}.sock")
            control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            control.bind(path)
            control.listen(64)
            control.setblocking(False)
            self._loop.add_reader(control, self._take_listener, control, key)
            self._controls[key] = control
        return str(control.getsockname())

    def serving(self) -> int:
        """How many confined processes the proxy listens for (each until it ends)."""
        return len(self._leases)

    def connections(self) -> int:
        """How many connections through the proxy are open."""
        return len(self._tasks)

    def refused(self, owner: str | None) -> tuple[str, ...]:
        """The refusals for ``owner``'s processes since the last call (taken: said once)."""
        return tuple(self._refused.pop(owner or "", ()))

    async def close(self) -> None:
        """Stop listening, cancel every connection and wait for it, remove the control sockets."""
        tasks = self.shut()
        await asyncio.gather(*tasks, return_exceptions=True)

    def shut(self) -> list[asyncio.Task[None]]:
        """:meth:`close` without the wait: the connections cancelled are returned."""
        self._closed = True
        for control in self._controls.values():
            self._loop.remove_reader(control)
            control.close()
        self._controls.clear()
        for pidfd in list(self._leases):
            self._release(pidfd)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        shutil.rmtree(self._directory, ignore_errors=True)
        return tasks

    # -- leases ----------------------------------------------------------------

    def _take_listener(self, control: socket.socket, owner: str) -> None:
        """A child connected to the control socket: receive its listener and pidfd."""
        try:
            conn, _ = control.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._loop.add_reader(conn, self._receive, conn, owner)

    def _receive(self, conn: socket.socket, owner: str) -> None:
        self._loop.remove_reader(conn)
        with conn:
            try:
                _, fds, _, _ = socket.recv_fds(conn, 16, 2)
            except OSError:
                log.warning("network proxy: a handover could not be read", exc_info=True)
                return
        if len(fds) != 2 or not _is_listener(fds[0]):
            for fd in fds:
                os.close(fd)
            log.warning("network proxy: a handover without a listener and a pidfd was refused")
            return
        listener = socket.socket(fileno=fds[0])
        listener.setblocking(False)
        lease = _Lease(owner, listener, fds[1])
        self._leases[lease.pidfd] = lease
        try:
            self._loop.add_reader(listener, self._accept, lease)
            self._loop.add_reader(lease.pidfd, self._release, lease.pidfd)
        except (OSError, ValueError):
            log.warning("network proxy: a handover could not be watched", exc_info=True)
            self._release(lease.pidfd)

    def _release(self, pidfd: int) -> None:
        """The process ended (or the proxy closes): stop listening in its namespace."""
        lease = self._leases.pop(pidfd, None)
        if lease is None:
            return
        self._loop.remove_reader(lease.listener)
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_reader(pidfd)
        lease.listener.close()
        os.close(pidfd)

    def _accept(self, lease: _Lease) -> None:
        try:
            conn, _ = lease.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        task = self._loop.create_task(self._serve(conn, lease.owner))
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("network proxy: a connection failed", exc_info=task.exception())

    # -- one connection --------------------------------------------------------

    async def _serve(self, conn: socket.socket, owner: str) -> None:
        """Read one request head, refuse it or connect, then relay both ways until closed."""
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=_HEAD_LIMIT)
        except BaseException:
            conn.close()
            raise
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
                request = parse_head(head)
            except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as exc:
                await _answer(writer, 400, f"tether proxy: bad request: {exc}")
                return
            except TimeoutError:
                return
            if not allowed(self.rules, request.host, request.port):
                self._refuse(owner, request)
                await _answer(
                    writer,
                    403,
                    f"tether sandbox: {request.host}:{request.port} is not in allowed_hosts",
                )
                return
            await self._forward(request, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _refuse(self, owner: str, request: Request) -> None:
        where = f"{request.host}:{request.port}"
        log.warning("sandbox: the network proxy refused %s (not in allowed_hosts)", where)
        seen = self._refused.setdefault(owner, [])
        if where not in seen:
            seen.append(where)

    async def _forward(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(self._resolve(request.host), request.port),
                _CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, f"tether proxy: {request.host}:{request.port}: {exc}")
            return
        try:
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.head)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()
            with contextlib.suppress(OSError):
                await up_writer.wait_closed()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until end of file, then half-close ``sink``."""
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        writer.write(head.encode() + body)
        await writer.drain()


def _is_listener(fd: int) -> bool:
    try:
        with socket.socket(fileno=os.dup(fd)) as probe:
            return bool(probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    except OSError:
        return False
