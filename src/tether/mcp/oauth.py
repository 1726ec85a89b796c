"""OAuth for HTTP servers: the authorization-code flow with PKCE, tokens per server.

A server that answers 401 is authorized the way the MCP specification says
(the SDK's :class:`~mcp.client.auth.OAuthClientProvider`: protected-resource
and authorization-server metadata, a client ID metadata document as the client
id where the authorization server takes them and the server entry names one
(``client_metadata_url``), else dynamic client registration, a PKCE code
grant, the ``resource`` indicator). The first grant needs a person:
``tether mcp login NAME`` (:func:`login_provider`) prints the authorization
URL (and opens a browser when there is one), and a callback on 127.0.0.1
receives the code, or the refusal that ends the login. What it yields —
tokens, their expiry and scope, the client and the authorization server's
metadata — is kept in ``$TETHER_HOME/mcp-auth/NAME.json`` (0600, replaced
atomically, and only once the new grant works). A login asks for the scopes
granted before and those ``--scope`` adds.

A session (:func:`session_provider`) uses that file: the access token is
sent, an expired one is refreshed with the refresh token (the new tokens are
written back), and a server that still refuses is a start failure that says
to log in: a session never waits for a person. A request refused for want of
scope (403 ``insufficient_scope``) is answered with an error naming the login
that adds it (:func:`scope_challenges`), and the connection stays.

``tether mcp logout NAME`` (:func:`logout`) revokes the tokens at the
server's revocation endpoint, when it has one, and removes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tether import __version__

if TYPE_CHECKING:
    import httpx2
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthToken,
    )

log = logging.getLogger(__name__)

AUTH_DIR = "mcp-auth"
"""Under the tether home: one file per server."""


def token_path(home: Path, name: str) -> Path:
    """Where the grant of server ``name`` is kept."""
    return home / AUTH_DIR / f"{name}.json"


class TokenFile:
    """The SDK's ``TokenStorage`` on one server's file (see the module docs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("mcp: %s is unreadable (%s); it is ignored", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, **changes: Any) -> None:
        data = self.read()
        data.update(changes)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(data, file, indent=2)
        os.replace(partial, self.path)

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        tokens = self.read().get("tokens")
        return None if tokens is None else OAuthToken.model_validate(tokens)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires = None
        if tokens.expires_in is not None:
            # Kept a little early, so a later process refreshes before the server
            # refuses (the clocks of the two need not agree to the second).
            lifetime = float(tokens.expires_in)
            expires = time.time() + lifetime - min(60.0, lifetime / 10)
        self.write(tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        client = self.read().get("client")
        return None if client is None else OAuthClientInformationFull.model_validate(client)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.write(client=client_info.model_dump(mode="json", exclude_none=True))


class LoginNeeded(Exception):
    """A server asked for a person's authorization during a session."""


class LoginRefused(Exception):
    """The authorization server sent the person back with an error instead of a code:
    they refused, or the request was refused (``error=access_denied``, ``invalid_scope``)."""


def _quiet_reported(record: logging.LogRecord) -> bool:
    """The SDK logs every failed flow with its traceback; the two failures tether
    reports itself, in one line, are left out."""
    failure = record.exc_info[1] if record.exc_info else None
    return not isinstance(failure, LoginNeeded | LoginRefused)


logging.getLogger("mcp.client.auth.oauth2").addFilter(_quiet_reported)


def _provider(
    url: str,
    storage: TokenFile,
    redirect_uri: str,
    redirect: Callable[[str], Awaitable[None]],
    callback: Callable[[], Awaitable[AuthorizationCodeResult]],
    *,
    document: str | None = None,
    scope: str | None = None,
    reread: bool = False,
) -> httpx2.Auth:
    """The SDK's provider on ``storage``; ``document`` is the client ID metadata
    document's address (the client id where the authorization server takes such
    documents, else dynamic registration), ``scope`` what a grant asks for at least.
    With ``reread``, the kept grant is read again before each request."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthMetadata

    class Provider(OAuthClientProvider):
        """The SDK's provider, which also keeps the tokens' expiry and the
        authorization server's metadata across processes (it holds them in memory)."""

        async def _initialize(self) -> None:
            await super()._initialize()
            data = storage.read()
            expires = data.get("expires_at")
            self.context.token_expiry_time = float(expires) if expires is not None else None
            if data.get("metadata") is not None and self.context.oauth_metadata is None:
                self.context.oauth_metadata = OAuthMetadata.model_validate(data["metadata"])
            # The SDK reads the storage once; a session reads it before each request, as
            # a login (more scopes) or another process's refresh may have replaced it.
            self._initialized = not reread

        async def _handle_token_response(self, response: httpx2.Response) -> None:
            await super()._handle_token_response(response)
            self._keep_metadata()

        async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
            refreshed = await super()._handle_refresh_response(response)
            if refreshed:
                log.info("mcp server at %s: its access token was refreshed", url)
            return refreshed

        def _keep_metadata(self) -> None:
            metadata = self.context.oauth_metadata
            if metadata is not None:
                storage.write(metadata=metadata.model_dump(mode="json", exclude_none=True))

    return Provider(
        server_url=url,
        client_metadata=_client_metadata(redirect_uri, scope),
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=document,
    )


def _client_metadata(redirect_uri: str, floor: str | None) -> OAuthClientMetadata:
    """tether as an OAuth client (a public one: no secret), asking for at least the
    scopes ``floor``.

    The SDK sets the client's scope from the server's challenge just before it
    registers and asks for a grant; a login that asks for more (``--scope``, and the
    scopes granted before) keeps them in what is registered and asked for.
    """
    from mcp.client.auth.utils import union_scopes
    from mcp.shared.auth import OAuthClientMetadata
    from pydantic import AnyUrl

    client: dict[str, Any] = {
        "client_name": f"tether {__version__}",
        "redirect_uris": [AnyUrl(redirect_uri)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    if floor is None:
        return OAuthClientMetadata(**client)

    class AtLeast(OAuthClientMetadata):
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "scope":
                value = union_scopes(floor, value)
            super().__setattr__(name, value)

    return AtLeast(scope=floor, **client)


def session_provider(home: Path, name: str, url: str, document: str | None = None) -> httpx2.Auth:
    """The auth of server ``name`` in a session: the stored grant, refreshed; never a
    login (see the module docs). ``document``: the server's ``client_metadata_url``."""

    async def refuse(authorization_url: str) -> None:
        raise LoginNeeded(f"it needs an OAuth login: run `{login_command(name)}`")

    async def never() -> AuthorizationCodeResult:  # pragma: no cover - refuse raises first
        raise LoginNeeded(f"it needs an OAuth login: run `{login_command(name)}`")

    storage = TokenFile(token_path(home, name))
    client = storage.read().get("client") or {}
    redirects = client.get("redirect_uris") or ["http://127.0.0.1/callback"]
    return _provider(url, storage, str(redirects[0]), refuse, never, document=document, reread=True)


def login_command(name: str, scope: str | None = None) -> str:
    """The command that logs in to server ``name`` (asking for ``scope`` too), as a
    person types it."""
    import shlex

    wanted = f" --scope {shlex.quote(scope)}" if scope else ""
    return f"tether mcp login {shlex.quote(name)}{wanted}"


class Login:
    """One ``tether mcp login``: the SDK's provider (:attr:`auth`) and the callback on
    127.0.0.1 that receives the person's answer.

    The callback takes only a request carrying the ``state`` of the authorization
    address shown; its ``code`` completes the grant, its ``error`` ends the login at
    once (:attr:`refusal`, :class:`LoginRefused` raised in the flow).
    """

    def __init__(self, pending: Path, kept: Path) -> None:
        self._pending, self._kept = pending, kept
        self.auth: httpx2.Auth | None = None
        self.refusal: str | None = None
        """Why the authorization server sent the person back without a code, if it did."""
        self._state: str | None = None
        self._received: asyncio.Future[AuthorizationCodeResult] = (
            asyncio.get_running_loop().create_future()
        )

    def keep(self) -> None:
        """Make the new grant the one sessions use (it replaces the earlier one)."""
        os.replace(self._pending, self._kept)

    async def show(self, authorization_url: str, show: Callable[[str], None]) -> None:
        """Remember the address's ``state``, then pass the address to ``show``."""
        self._state = parse_qs(urlsplit(authorization_url).query).get("state", [None])[0]
        show(authorization_url)

    async def answer(self) -> AuthorizationCodeResult:
        """The code the person's browser brought.

        Raises:
            LoginRefused: it brought an error instead.
        """
        return await self._received

    async def on_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A request on the callback: read its target, settle the login, answer the page."""
        try:
            line = (await reader.readline()).decode(errors="replace").split()
            while (await reader.readline()).strip():
                pass
            query = parse_qs(urlsplit(line[1]).query) if len(line) > 1 else {}
            status, body = self._settle({key: values[0] for key, values in query.items()})
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                f"Content-Length: {len(body.encode())}\r\n\r\n{body}".encode()
            )
            await writer.drain()
        finally:
            writer.close()

    def _settle(self, query: dict[str, str]) -> tuple[str, str]:
        from mcp.shared.auth import AuthorizationCodeResult

        if self._state is None or query.get("state") != self._state or self._received.done():
            return "400 Bad Request", "tether: this is not the answer this login waits for.\n"
        if "error" in query:
            detail = query.get("error_description")
            self.refusal = f"{query['error']}{f' ({detail})' if detail else ''}"
            self._received.set_exception(LoginRefused(f"authorization refused: {self.refusal}"))
            return "200 OK", f"tether: authorization refused ({self.refusal}).\n"
        if not query.get("code"):
            return "400 Bad Request", "tether: no authorization code in this request.\n"
        code, issuer = query["code"], query.get("iss")
        self._received.set_result(AuthorizationCodeResult(code=code, state=self._state, iss=issuer))
        return "200 OK", "tether: authorized; you can close this page.\n"


@contextlib.asynccontextmanager
async def login_provider(
    home: Path,
    name: str,
    url: str,
    show: Callable[[str], None],
    *,
    document: str | None = None,
    scope: str | None = None,
) -> AsyncIterator[Login]:
    """``tether mcp login NAME``: a fresh grant (a new registration, unless ``document``
    is the client id), asking for the scopes granted before and ``scope``; the
    authorization URL is passed to ``show``, the answer comes on 127.0.0.1.

    The new grant is written beside the kept one and replaces it only on
    :meth:`Login.keep`: a login that fails or is refused leaves the earlier grant as
    it was.
    """
    from mcp.client.auth.utils import union_scopes

    kept = token_path(home, name)
    granted = (TokenFile(kept).read().get("tokens") or {}).get("scope")
    pending = TokenFile(kept.with_name(f".{kept.name}.login"))
    pending.path.unlink(missing_ok=True)
    login = Login(pending.path, kept)
    listener = await asyncio.start_server(login.on_request, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]

    async def redirect(authorization_url: str) -> None:
        await login.show(authorization_url, show)

    try:
        login.auth = _provider(
            url,
            pending,
            f"http://127.0.0.1:{port}/callback",
            redirect,
            login.answer,
            document=document,
            scope=union_scopes(granted, scope),
        )
        yield login
    finally:
        listener.close()
        await listener.wait_closed()
        pending.path.unlink(missing_ok=True)


STEP_UP_ERROR = -32001
"""The JSON-RPC error code of a request refused for want of OAuth scope (a code of the
range JSON-RPC leaves to implementations)."""


def scope_challenges(
    name: str,
    inner: httpx2.AsyncBaseTransport,
    deliver: Callable[[dict[str, Any]], None] | None = None,
) -> httpx2.AsyncBaseTransport:
    """``inner`` for server ``name``'s connection, where a request the server refuses for
    want of scope (403 ``insufficient_scope``, RFC 6750) is answered with a JSON-RPC
    error for that request, saying which login adds the scope: as the HTTP answer
    (streamable HTTP reads a JSON-RPC error there), or, with ``deliver``, handed to
    ``deliver`` while the POST is answered 202 (over SSE answers come on the stream).

    Below the OAuth provider, so the SDK never starts a new authorization for it (a
    session never waits for a person); the call fails, and the connection and the
    server's other tools stay.
    """
    import httpx2
    from mcp.client.auth.utils import extract_field_from_www_auth

    class ScopeChallenges(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await inner.handle_async_request(request)
            if response.status_code != 403:
                return response
            challenge = extract_field_from_www_auth(response, "error")
            request_id = _request_id(request)
            if challenge != "insufficient_scope" or request_id is None:
                return response
            await response.aclose()
            scope = extract_field_from_www_auth(response, "scope")
            error = {"code": STEP_UP_ERROR, "message": step_up_advice(name, scope)}
            answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
            if deliver is None:
                return httpx2.Response(403, json=answer, request=request)
            deliver(answer)
            return httpx2.Response(202, request=request)

        async def aclose(self) -> None:
            await inner.aclose()

    return ScopeChallenges()


@contextlib.asynccontextmanager
async def sse_streams(
    name: str, url: str, headers: dict[str, str], auth: httpx2.Auth | None
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's SSE transport to server ``name``, whose read stream also carries the
    answers :func:`scope_challenges` gives to requests refused for want of scope.

    A task of this context forwards what the SDK reads; it ends with the SDK's stream,
    and is cancelled and awaited on exit.
    """
    import math

    import anyio
    import httpx2
    from mcp.client.sse import sse_client
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCError

    merged, reader = anyio.create_memory_object_stream[Any](math.inf)

    def refused(answer: dict[str, Any]) -> None:
        merged.send_nowait(SessionMessage(JSONRPCError.model_validate(answer)))

    def client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        transport = scope_challenges(name, httpx2.AsyncHTTPTransport(), refused)
        return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, transport=transport)

    async def forward(read: Any) -> None:
        async with merged:
            async for item in read:
                await merged.send(item)

    async with sse_client(url, headers=headers, auth=auth, httpx_client_factory=client) as (
        read,
        write,
    ):
        forwarding = asyncio.get_running_loop().create_task(forward(read), name=f"mcp-sse:{name}")
        try:
            yield reader, write
        finally:
            forwarding.cancel()
            await asyncio.gather(forwarding, return_exceptions=True)


def step_up_advice(name: str, scope: str | None) -> str:
    """What a request of server ``name`` refused for want of ``scope`` answers."""
    if not scope:
        return (
            "it refused this for want of an OAuth scope it did not name (insufficient_scope): "
            f"run `{login_command(name, 'SCOPE')}` with the scope its documentation gives"
        )
    return f"it needs the OAuth scope {scope!r} for this: run `{login_command(name, scope)}`"


def _request_id(request: httpx2.Request) -> str | int | None:
    """The id of the JSON-RPC request ``request`` carries, if it carries one."""
    try:
        message = json.loads(request.content)
    except (ValueError, RuntimeError):  # not JSON, or a streamed body
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    found = message.get("id")
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


async def logout(home: Path, name: str) -> str:
    """Revoke the stored tokens of server ``name`` (where the server can) and forget
    them; returns what was done, in a few words."""
    import httpx2

    path = token_path(home, name)
    data = TokenFile(path).read()
    if not path.exists():
        return "not logged in"
    endpoint = (data.get("metadata") or {}).get("revocation_endpoint")
    tokens = data.get("tokens") or {}
    client = data.get("client") or {}
    revoked = "tokens forgotten (the server has no revocation endpoint)"
    if endpoint and client.get("client_id"):
        # An empty secret for a public client: some servers (the SDK's among them)
        # require the field.
        form = {
            "client_id": client["client_id"],
            "client_secret": client.get("client_secret") or "",
        }
        try:
            async with httpx2.AsyncClient(timeout=10.0) as http:
                for kind in ("refresh_token", "access_token"):
                    if tokens.get(kind):
                        answer = await http.post(
                            endpoint, data={**form, "token": tokens[kind], "token_type_hint": kind}
                        )
                        answer.raise_for_status()
            revoked = "tokens revoked and forgotten"
        except httpx2.HTTPError as exc:
            revoked = f"tokens forgotten; revoking them failed: {exc}"
    path.unlink(missing_ok=True)
    return revoked
