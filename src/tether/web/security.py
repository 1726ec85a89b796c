"""The web app's guard: the access token, the origin check, and the headers every response carries.

:class:`Guard` is ASGI middleware around the whole app:

* **The token.** ``tether web`` makes a random token and prints a URL holding
  it (``/?token=…``). Every API request must carry it: as ``Authorization:
  Bearer <token>`` (scripts, and the page's own requests), or, for a ``GET``
  (an ``EventSource``, which cannot set a header), as the ``token`` query
  parameter. Anything else is ``401`` with a body that says only that (no
  route, no session, no detail leaks).
* **No cookie.** A browser sends a host's cookies to every port of that host,
  so a cookie holding the token would reach any other server the browser
  visits on it (a dev server the agent started, say). The token is therefore
  never a cookie: the page's script keeps it in the origin's ``localStorage``
  (scheme, host *and port*: no other server's page can read it) and sends it
  as the header itself. A cookie opens nothing, so a stolen one is useless,
  and a cross-site request cannot borrow the browser's credentials (there is
  no ambient one to borrow).
* **The pages** (``/``, ``/s/…``) and their files (``/static/…``) hold no
  data and are served to anyone; a page visited with a wrong ``token`` is a
  ``401``. Nothing is ever redirected, so no URL can send a browser elsewhere.
* **Origin.** A request that changes state (any method but ``GET``, ``HEAD``)
  whose ``Origin`` is not this server (``http://`` + its ``Host``) is ``403``,
  token or not: a page of another origin (or one reached by DNS rebinding)
  never changes anything.
* **WebSockets** (``/acp``): an upgrade needs the token as a ``GET`` does (the
  header, or the ``token`` parameter a browser's ``WebSocket`` can send), and, since
  a WebSocket changes state, passes the origin check; a refused upgrade is
  answered ``401`` or ``403`` like any request.
* **Headers.** Every response, a refusal included, carries a strict
  Content-Security-Policy (scripts, styles and connections from this origin
  only, no inline script, no framing), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
)
SAFE_METHODS = frozenset({"GET", "HEAD"})


def new_token() -> str:
    """A fresh random access token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


PAGES = ("/static/", "/s/")
"""Path prefixes of the pages and their files (and ``/`` itself): served without the token."""


class Guard:
    """ASGI middleware: lets in only requests that carry ``token`` (see the module docs)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        headers = _headers(scope)
        method = scope["method"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.get("token") if method in SAFE_METHODS else None
        if given is not None and not self._right(given):
            await _refuse(send_secured, 401, "unauthorized: open the URL tether web printed")
            return
        path = scope["path"]
        page = method in SAFE_METHODS and (path == "/" or path.startswith(PAGES))
        if not page and not self._right(_bearer(headers.get("authorization", "")) or given):
            await _refuse(send_secured, 401, "unauthorized: open the URL tether web printed")
            return
        if method not in SAFE_METHODS and not _same_origin(headers):
            await _refuse(send_secured, 403, "forbidden: cross-origin request refused")
            return
        await self._app(scope, receive, send_secured)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket upgrade: the token as for a ``GET`` (header or ``token`` query
        parameter), and the origin check of a state change (a WebSocket changes state)."""
        headers = _headers(scope)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = _bearer(headers.get("authorization", "")) or query.get("token")
        if not self._right(given):
            await _refuse_upgrade(
                scope, receive, send, 401, "unauthorized: open the URL tether web printed"
            )
            return
        if not _same_origin(headers):
            await _refuse_upgrade(
                scope, receive, send, 403, "forbidden: cross-origin request refused"
            )
            return
        await self._app(scope, receive, send)

    def _right(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )


def _same_origin(headers: dict[str, str]) -> bool:
    """Whether the request's ``Origin``, when it sends one, is this server."""
    origin = headers.get("origin")
    if origin is None:
        return True
    host = headers.get("host", "")
    return bool(host) and origin in (f"http://{host}", f"https://{host}")


def _headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode("latin-1").lower(): value.decode("latin-1")
        for key, value in scope.get("headers", ())
    }


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def _refuse(send: Send, status: int, text: str) -> None:
    body = ('{"error": "' + text + '"}').encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse_upgrade(
    scope: Scope, receive: Receive, send: Send, status: int, text: str
) -> None:
    """Refuse a WebSocket upgrade: with ``status`` and a body where the server can send
    one, else by closing before it is accepted (the server answers ``403``)."""
    await receive()  # websocket.connect
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = ('{"error": "' + text + '"}').encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
    ]
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})
