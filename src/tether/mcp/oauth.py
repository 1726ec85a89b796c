"""OAuth for HTTP servers: the authorization-code flow with PKCE, tokens per server.

A server that answers 401 is authorized the way the MCP specification says
(the SDK's :class:`~mcp.client.auth.OAuthClientProvider`: protected-resource
and authorization-server metadata, dynamic client registration, a PKCE code
grant, the ``resource`` indicator). The first grant needs a person:
``tether mcp login NAME`` (:func:`login_provider`) prints the authorization
URL (and opens a browser when there is one), and a callback on 127.0.0.1
receives the code. What it yields — tokens, their expiry, the registered
client and the authorization server's metadata — is kept in
``$TETHER_HOME/mcp-auth/NAME.json`` (0600, replaced atomically).

A session (:func:`session_provider`) uses that file: the access token is
sent, an expired one is refreshed with the refresh token (the new tokens are
written back), and a server that still refuses is a start failure that says
to log in: a session never waits for a person.

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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tether import __version__

if TYPE_CHECKING:
    import httpx2
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

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


def _provider(
    url: str,
    storage: TokenFile,
    redirect_uri: str,
    redirect: Callable[[str], Awaitable[None]],
    callback: Callable[[], Awaitable[AuthorizationCodeResult]],
) -> httpx2.Auth:
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata, OAuthMetadata
    from pydantic import AnyUrl

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

    metadata = OAuthClientMetadata(
        client_name=f"tether {__version__}",
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return Provider(
        server_url=url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
    )


def session_provider(home: Path, name: str, url: str) -> httpx2.Auth:
    """The auth of server ``name`` in a session: the stored grant, refreshed; never a
    login (see the module docs)."""

    async def refuse(authorization_url: str) -> None:
        raise LoginNeeded(f"it needs an OAuth login: run `tether mcp login {name}`")

    async def never() -> AuthorizationCodeResult:  # pragma: no cover - refuse raises first
        raise LoginNeeded(f"it needs an OAuth login: run `tether mcp login {name}`")

    storage = TokenFile(token_path(home, name))
    client = storage.read().get("client") or {}
    redirects = client.get("redirect_uris") or ["http://127.0.0.1/callback"]
    return _provider(url, storage, str(redirects[0]), refuse, never)


@contextlib.asynccontextmanager
async def login_provider(home: Path, name: str, url: str, show: Callable[[str], None]) -> Any:
    """The auth of ``tether mcp login NAME``: a fresh grant, the authorization URL
    passed to ``show``, the code received on a callback on 127.0.0.1."""
    from mcp.shared.auth import AuthorizationCodeResult

    storage = TokenFile(token_path(home, name))
    storage.write(client=None, tokens=None, expires_at=None)  # a new registration and grant
    received: asyncio.Future[AuthorizationCodeResult] = asyncio.get_running_loop().create_future()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode(errors="replace").split()
            while (await reader.readline()).strip():
                pass
            query = parse_qs(urlsplit(line[1]).query) if len(line) > 1 else {}
            code = query.get("code", [""])[0]
            if code and not received.done():
                state = query.get("state", [None])[0]
                issuer = query.get("iss", [None])[0]
                received.set_result(AuthorizationCodeResult(code=code, state=state, iss=issuer))
                body = b"tether: authorized; you can close this page.\n"
            else:
                body = b"tether: no authorization code in this request.\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]

    async def redirect(authorization_url: str) -> None:
        show(authorization_url)

    async def callback() -> AuthorizationCodeResult:
        return await received

    try:
        yield _provider(url, storage, f"http://127.0.0.1:{port}/callback", redirect, callback)
    finally:
        listener.close()
        await listener.wait_closed()


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
