"""The web app's guard: the access token, CSRF, and the headers every response carries.

:class:`Guard` is ASGI middleware around the whole app:

* **The token.** ``tether web`` makes a random token and prints a URL holding
  it (``/?token=…``). A request is let in when it carries the token as
  ``Authorization: Bearer <token>`` (scripts), or as the ``tether_token_<port>``
  cookie (browsers; named by the port the browser reached, because browsers
  keep cookies per host, not per port, and two servers on one host must not
  overwrite each other's). A page request with a right ``token`` query parameter
  sets that cookie (``HttpOnly``, ``SameSite=Strict``) and is redirected to
  the same URL without it, so the token leaves the address bar. Anything else
  is ``401`` with a body that says only that (no route, no session, no
  detail leaks).
* **CSRF.** A request that changes state (any method but ``GET``, ``HEAD``)
  and is let in by the cookie must also send ``X-Tether-CSRF`` equal to the
  ``tether_csrf_<port>`` cookie (a double-submit token, readable by the page's own
  script and by no other site's), and an ``Origin``, when it sends one, that
  is this server. A Bearer request needs neither: no browser adds that
  header by itself.
* **Headers.** Every response, a refusal included, carries a strict
  Content-Security-Policy (scripts, styles and connections from this origin
  only, no inline script, no framing), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "tether_token"
CSRF_COOKIE = "tether_csrf"
"""The cookies' names before their port suffix (see :func:`cookie_name`)."""
CSRF_HEADER = "x-tether-csrf"

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


def cookie_name(base: str, headers: dict[str, str]) -> str:
    """``base`` named for the port in the request's ``Host`` (``tether_token_8123``), as
    the page's script names it from ``location.port``; ``base`` alone without one."""
    host = headers.get("host", "")
    port = host.rpartition(":")[2] if not host.endswith("]") else ""
    return f"{base}_{port}" if port.isdigit() else base


def new_token() -> str:
    """A fresh random access token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class Guard:
    """ASGI middleware: lets in only requests that carry ``token`` (see the module docs)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token
        self._csrf = secrets.token_urlsafe(24)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        headers = _headers(scope)
        cookies = _cookies(headers.get("cookie", ""))
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = dict(query).get("token")
        bearer = _bearer(headers.get("authorization", ""))
        method = scope["method"]
        if given is not None and method in SAFE_METHODS and self._right(given):
            await self._enter(scope, query, headers, send_secured)
            return
        if bearer is not None and self._right(bearer):
            await self._app(scope, receive, send_secured)
            return
        if not self._right(cookies.get(cookie_name(TOKEN_COOKIE, headers))):
            await _refuse(send_secured, 401, "unauthorized: open the URL tether web printed")
            return
        if method not in SAFE_METHODS and not self._same_site(scope, headers, cookies):
            await _refuse(send_secured, 403, "forbidden: cross-site request refused")
            return
        await self._app(scope, receive, send_secured)

    def _right(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )

    def _same_site(self, scope: Scope, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        """The CSRF check of a state-changing request let in by its cookie."""
        sent = headers.get(CSRF_HEADER)
        if sent is None or not hmac.compare_digest(sent.encode(), self._csrf.encode()):
            return False
        if cookies.get(cookie_name(CSRF_COOKIE, headers)) != sent:
            return False
        origin = headers.get("origin")
        if origin is None:
            return True
        host = headers.get("host", "")
        return origin in (f"http://{host}", f"https://{host}")

    async def _enter(
        self, scope: Scope, query: list[tuple[str, str]], headers: dict[str, str], send: Send
    ) -> None:
        """A first visit with the token: set the cookies, redirect to the URL without it."""
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode()),
                    (
                        b"set-cookie",
                        f"{cookie_name(TOKEN_COOKIE, headers)}={self._token};"
                        " Path=/; HttpOnly; SameSite=Strict".encode(),
                    ),
                    (
                        b"set-cookie",
                        f"{cookie_name(CSRF_COOKIE, headers)}={self._csrf};"
                        " Path=/; SameSite=Strict".encode(),
                    ),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode("latin-1").lower(): value.decode("latin-1")
        for key, value in scope.get("headers", ())
    }


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


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
