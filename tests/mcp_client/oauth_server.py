"""An MCP server that requires OAuth, for the tests: ``python oauth_server.py PORT
[--expires SECONDS] [--cimd] [--refuse-admin] [--sse]``.

The SDK's authorization-server support (``mcp.server.auth``: metadata
discovery, dynamic client registration, ``/authorize`` with PKCE, ``/token``
for the code and refresh grants, ``/revoke``) serves on the same origin as the
MCP endpoint (``/mcp``, streamable HTTP; with ``--sse``, ``/sse`` and
``/messages/``, the 2024 transport). What the SDK leaves to a server is
where its grants are kept: here in memory. ``/authorize`` approves at once (no
person to ask), redirecting to the client's callback with a code. Access
tokens live ``--expires`` seconds (default an hour).

``--cimd`` makes it an authorization server that takes client ID metadata
documents: its metadata says ``client_id_metadata_document_supported``, and a
client id that is an ``https`` URL is the address of the client's document,
fetched (trusting the CA bundle named by ``SSL_CERT_FILE``) when the client is
first seen; a loopback redirect URI of the document matches on any port (RFC
8252). ``--refuse-admin`` plays a person who refuses every authorization that asks for
the scope ``admin``: the redirect carries ``error=access_denied``.

Tools: ``whoami`` (the client id of the token), ``grants_seen`` (how many codes,
refreshes and revocations the server has seen, as ``codes=N refreshes=N
revoked=N``), ``my_scopes`` (the scopes of the token), and ``erase``, which
needs the scope ``admin``: a call without it is answered 403
``insufficient_scope`` with ``scope="admin"`` (incremental authorization).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import ssl
import sys
import time
from typing import Any

import httpx2
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

PORT = int(sys.argv[1])
EXPIRES = int(sys.argv[sys.argv.index("--expires") + 1]) if "--expires" in sys.argv else 3600
CIMD = "--cimd" in sys.argv
REFUSE_ADMIN = "--refuse-admin" in sys.argv
SSE = "--sse" in sys.argv
BASE = f"http://127.0.0.1:{PORT}"
REGISTRATION = ClientRegistrationOptions(enabled=True)
REVOCATION = RevocationOptions(enabled=True)
ADMIN = "admin"
"""The scope the ``erase`` tool needs."""


class DocumentClient(OAuthClientInformationFull):
    """A client known by its metadata document: its loopback redirect URIs match on
    any port (RFC 8252 §7.3), as a native client's port is chosen when it runs."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is not None and redirect_uri.host in ("127.0.0.1", "localhost"):
            for allowed in self.redirect_uris or ():
                if (allowed.host, allowed.path) == (redirect_uri.host, redirect_uri.path):
                    return redirect_uri
        return super().validate_redirect_uri(redirect_uri)


class Grants:
    """The authorization server's records (an OAuthAuthorizationServerProvider)."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.counts = {"codes": 0, "refreshes": 0, "revoked": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if CIMD and client_id.startswith("https://") and client_id not in self.clients:
            await self._fetch_document(client_id)
        return self.clients.get(client_id)

    async def _fetch_document(self, url: str) -> None:
        trust = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
        async with httpx2.AsyncClient(verify=trust, timeout=10.0) as http:
            answer = await http.get(url)
        document = answer.json() if answer.status_code == 200 else {}
        if document.get("client_id") == url:
            self.clients[url] = DocumentClient.model_validate(document)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        if REFUSE_ADMIN and ADMIN in (params.scopes or []):
            raise AuthorizeError(error="access_denied", error_description="the person said no")
        code = secrets.token_urlsafe(32)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.counts["codes"] += 1
        return self._issue(authorization_code.client_id, authorization_code.scopes)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        self.counts["refreshes"] += 1
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.counts["revoked"] += 1
        client = token.client_id
        self.access = {k: v for k, v in self.access.items() if v.client_id != client}
        self.refresh = {k: v for k, v in self.refresh.items() if v.client_id != client}

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires = math.ceil(time.time() + EXPIRES)  # not before the client counts
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access,
            expires_in=EXPIRES,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )


grants = Grants()
AUTH = AuthSettings(
    issuer_url=BASE,
    resource_server_url=f"{BASE}/sse" if SSE else f"{BASE}/mcp",
    validate_token_resource=False,
    client_registration_options=REGISTRATION,
    revocation_options=REVOCATION,
)
server = MCPServer("oauth-tests", auth_server_provider=grants, auth=AUTH)


class Front:
    """In front of the SDK's application: the authorization server's metadata with
    ``--cimd``, and the 403 of an ``erase`` call whose token lacks ``admin``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path")
        if CIMD and path == "/.well-known/oauth-authorization-server":
            metadata = build_metadata(AUTH.issuer_url, None, REGISTRATION, REVOCATION)
            metadata.client_id_metadata_document_supported = True
            await _answer(send, 200, metadata.model_dump_json(exclude_none=True).encode())
            return
        if path in ("/mcp", "/messages/") and scope.get("method") == "POST":
            body, receive = await _buffered(receive)
            if _calls_erase(body) and ADMIN not in _scopes_of(scope):
                challenge = (
                    f'Bearer error="insufficient_scope", scope="{ADMIN}", '
                    f'resource_metadata="{build_resource_metadata_url(AUTH.resource_server_url)}"'
                )
                error = b'{"error": "insufficient_scope"}'
                await _answer(send, 403, error, [(b"www-authenticate", challenge.encode())])
                return
        await self.app(scope, receive, send)


async def _buffered(receive: Any) -> tuple[bytes, Any]:
    """The whole body of a request, and a ``receive`` that gives it again."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    sent = False

    async def again() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, again


def _calls_erase(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return (
        isinstance(message, dict)
        and message.get("method") == "tools/call"
        and (message.get("params") or {}).get("name") == "erase"
    )


def _scopes_of(scope: Any) -> list[str]:
    headers = dict(scope.get("headers") or ())
    token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
    found = grants.access.get(token)
    return list(found.scopes) if found is not None else []


async def _answer(
    send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


@server.tool()
def whoami() -> str:
    """The client id of the access token of this request."""
    token = get_access_token()
    return token.client_id if token is not None else "<nobody>"


@server.tool()
def my_scopes() -> str:
    """The scopes of the access token of this request, space-separated."""
    token = get_access_token()
    return " ".join(token.scopes) if token is not None else ""


@server.tool()
def erase() -> str:
    """A call that needs the scope ``admin`` (checked in front of the server)."""
    return "erased"


@server.tool()
def grants_seen() -> str:
    """How many codes, refreshes and revocations the server has seen."""
    return " ".join(f"{name}={count}" for name, count in grants.counts.items())


if __name__ == "__main__":
    app = server.sse_app() if SSE else server.streamable_http_app()
    uvicorn.run(Front(app), host="127.0.0.1", port=PORT)
