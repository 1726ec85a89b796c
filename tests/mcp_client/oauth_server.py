"""An MCP server that requires OAuth, for the tests: ``python oauth_server.py PORT
[--expires SECONDS]``.

The SDK's authorization-server support (``mcp.server.auth``: metadata
discovery, dynamic client registration, ``/authorize`` with PKCE, ``/token``
for the code and refresh grants, ``/revoke``) serves on the same origin as the
MCP endpoint (``/mcp``, streamable HTTP). What the SDK leaves to a server is
where its grants are kept: here in memory. ``/authorize`` approves at once (no
person to ask), redirecting to the client's callback with a code. Access
tokens live ``--expires`` seconds (default an hour).

Tools: ``whoami`` (the client id of the token), ``grants_seen`` (how many codes,
refreshes and revocations the server has seen, as ``codes=N refreshes=N
revoked=N``).
"""

from __future__ import annotations

import math
import secrets
import sys
import time

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PORT = int(sys.argv[1])
EXPIRES = int(sys.argv[sys.argv.index("--expires") + 1]) if "--expires" in sys.argv else 3600
BASE = f"http://127.0.0.1:{PORT}"


class Grants:
    """The authorization server's records (an OAuthAuthorizationServerProvider)."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.counts = {"codes": 0, "refreshes": 0, "revoked": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
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
server = MCPServer(
    "oauth-tests",
    auth_server_provider=grants,
    auth=AuthSettings(
        issuer_url=BASE,
        resource_server_url=f"{BASE}/mcp",
        validate_token_resource=False,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
    ),
)


@server.tool()
def whoami() -> str:
    """The client id of the access token of this request."""
    token = get_access_token()
    return token.client_id if token is not None else "<nobody>"


@server.tool()
def grants_seen() -> str:
    """How many codes, refreshes and revocations the server has seen."""
    return " ".join(f"{name}={count}" for name, count in grants.counts.items())


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=PORT)
