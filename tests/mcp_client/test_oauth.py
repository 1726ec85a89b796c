"""OAuth against a real local authorization server (the SDK's, in ``oauth_server.py``):
``tether mcp login`` as a person runs it (a process printing the address, a browser
following it), the tokens kept 0600, refreshed by a session once expired, revoked
by ``tether mcp logout``; a client ID metadata document served over HTTPS (a
certificate made here) as the client id; scopes added by a later login; a refused
authorization."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import socket
import ssl
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp_client.support import HERE
from tether.cli.main import main
from tether.mcp.connection import McpConnection, McpSettings
from tether.mcp.errors import McpStartError
from tether.mcp.oauth import session_provider, token_path
from tether.mcp.servers import HttpServer
from tether.runtime.signal import CancelSignal

OAUTH_SERVER = str(HERE / "oauth_server.py")
EXPIRES = 1
"""Seconds an access token of the test server lives."""


class _Owner:
    id = "oauth"


@asynccontextmanager
async def oauth_server(
    *options: str, expires: int = EXPIRES, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """The OAuth test server on 127.0.0.1 (``options`` such as ``--cimd``, ``env`` on top
    of this process's); yields its MCP endpoint (``/sse`` with ``--sse``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        OAUTH_SERVER,
        str(port),
        "--expires",
        str(expires),
        *options,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(30):
            while b"Uvicorn running on" not in await process.stderr.readline():
                pass
        yield f"http://127.0.0.1:{port}/{'sse' if '--sse' in options else 'mcp'}"
    finally:
        process.kill()
        await process.wait()


async def _login(home: Path, *options: str, authorized: bool = True) -> str:
    """``tether mcp login [OPTIONS] web`` in a process of its own; the person's browser
    follows the address it prints. Returns what it printed; the login must end (exit
    status 0 when ``authorized``, else 1) within the test's wait, far below its own."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from tether.cli.launch import entry; entry()",
        "--data-dir",
        str(home),
        "mcp",
        "login",
        "--no-browser",
        *options,
        "web",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    assert process.stdout is not None
    printed: list[str] = []
    async with asyncio.timeout(60):
        while not (line := (await process.stdout.readline()).decode()).startswith("http"):
            assert line, f"it ended without an address: {printed}"
            printed.append(line)
        async with httpx2.AsyncClient(follow_redirects=True) as browser:
            page = await browser.get(line.strip())
        assert page.status_code == 200
        assert ("authorized;" if authorized else "authorization refused") in page.text
        rest = (await process.stdout.read()).decode()
        assert await process.wait() == (0 if authorized else 1), rest
    return "".join(printed) + line + rest


@asynccontextmanager
async def _session(
    home: Path, url: str, document: str | None = None, transport: Literal["http", "sse"] = "http"
) -> AsyncIterator[McpConnection]:
    """Server ``web`` started as a session starts it (the stored grant), stopped after."""
    connection = McpConnection(
        HttpServer("web", url, transport=transport, client_metadata_url=document),
        McpSettings(startup_timeout=30),
        cwd=None,
        guard=None,
        owner=_Owner(),
        auth=session_provider(home, "web", url, document),
    )
    try:
        await connection.start()
        yield connection
    finally:
        await connection.close()


async def _text(connection: McpConnection, tool: str) -> str:
    result = await connection.call(tool, {}, CancelSignal())
    return result.content[0].text  # type: ignore[union-attr,no-any-return]


async def _call(home: Path, url: str, tool: str, document: str | None = None) -> str:
    """Start the server as a session does, call ``tool``, stop it."""
    async with _session(home, url, document) as connection:
        return await _text(connection, tool)


def _add(home: Path, url: str, *options: str, transport: str = "http") -> None:
    words = ["--data-dir", str(home), "mcp", "add", "--transport", transport, *options, "web", url]
    assert main(words) == 0


def _seen(text: str) -> dict[str, int]:
    """``grants_seen``'s answer: ``{"codes": N, "refreshes": N, "revoked": N}``."""
    return {name: int(count) for name, count in (pair.split("=") for pair in text.split())}


@pytest.mark.timeout(120)
async def test_login_refresh_and_logout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path
    async with oauth_server() as url:
        await asyncio.to_thread(_add, home, url)

        # Without a login a session's start fails, saying what to do.
        with pytest.raises(McpStartError, match="tether mcp login web"):
            await _call(home, url, "whoami")

        printed = await _login(home)
        assert "Open this address to authorize tether with 'web'" in printed
        assert "web: logged in (4 tool(s), MCP 2026-07-28)" in printed
        path = token_path(home, "web")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        kept = json.loads(path.read_text())
        client_id = kept["client"]["client_id"]

        # The access token has expired: the session refreshes it and keeps the new one.
        await asyncio.sleep(max(0.0, kept["expires_at"] - time.time()) + 0.05)
        assert await _call(home, url, "whoami") == client_id
        seen = _seen(await _call(home, url, "grants_seen"))
        # One code; a refresh at least (a slow machine may let the new token expire too).
        assert seen["codes"] == 1 and seen["refreshes"] >= 1
        renewed = json.loads(path.read_text())
        assert renewed["tokens"]["access_token"] != kept["tokens"]["access_token"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

        capsys.readouterr()
        logout = ["--data-dir", str(home), "mcp", "logout", "web"]
        assert await asyncio.to_thread(main, logout) == 0
        assert capsys.readouterr().out.strip() == "web: tokens revoked and forgotten"
        assert not path.exists()
        with pytest.raises(McpStartError, match="tether mcp login web"):
            await _call(home, url, "whoami")


def test_login_is_for_http_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--data-dir", str(tmp_path), "mcp"]
    assert main([*base, "add", "local", "--", sys.executable, "-c", "pass"]) == 0
    assert main([*base, "login", "local"]) == 2
    assert "'local' is a stdio server: OAuth is for HTTP servers" in capsys.readouterr().err
    assert main([*base, "logout", "nobody"]) == 2
    assert "no MCP server named 'nobody'" in capsys.readouterr().err


# -- client ID metadata documents ------------------------------------------------------


@contextmanager
def document_server(directory: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """An HTTPS server on 127.0.0.1 (a self-signed certificate made here) serving client
    metadata documents at ``/clients/NAME.json``; yields its origin, the certificate
    (the CA bundle to trust) and the paths requested so far."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "documents.pem", directory / "documents.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    requested: list[str] = []

    class Documents(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            client_id = f"https://127.0.0.1:{self.server.server_address[1]}{self.path}"
            document = {
                "client_id": client_id,
                "client_name": "tether (tests)",
                "redirect_uris": ["http://127.0.0.1/callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }
            body = json.dumps(document).encode()
            self.send_response(200 if self.path.startswith("/clients/") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Documents)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", cert_file, requested
    finally:
        server.shutdown()
        server.server_close()
        serving.join()


@pytest.mark.timeout(120)
async def test_metadata_document_is_the_client_id_where_the_server_takes_documents(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with document_server(tmp_path) as (origin, trusted, requested):
        document = f"{origin}/clients/tether.json"
        async with oauth_server("--cimd", env={"SSL_CERT_FILE": str(trusted)}) as url:
            await asyncio.to_thread(_add, home, url, "--client-metadata-url", document)
            printed = await _login(home)
            assert "web: logged in (4 tool(s)" in printed
            # No registration: the document's address is the client id, which the
            # authorization server resolved over HTTPS.
            assert f"client_id={quote(document, safe='')}" in printed
            assert (
                json.loads(token_path(home, "web").read_text())["client"]["client_id"] == document
            )
            assert requested == ["/clients/tether.json"]
            assert await _call(home, url, "whoami", document) == document


@pytest.mark.timeout(120)
async def test_dynamic_registration_where_the_server_takes_no_documents(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with document_server(tmp_path) as (origin, _trusted, requested):
        document = f"{origin}/clients/tether.json"
        async with oauth_server() as url:
            await asyncio.to_thread(_add, home, url, "--client-metadata-url", document)
            assert "web: logged in (4 tool(s)" in await _login(home)
            client_id = json.loads(token_path(home, "web").read_text())["client"]["client_id"]
            assert client_id != document and not client_id.startswith("https://")
            assert await _call(home, url, "whoami", document) == client_id
        assert requested == []


def test_a_bad_client_metadata_url_is_refused_and_nothing_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--data-dir", str(tmp_path), "mcp", "add", "--transport", "http"]
    good = "https://example.com/tether.json"
    assert main([*base, "--client-metadata-url", good, "docs", "http://127.0.0.1:9/mcp"]) == 0
    kept = (tmp_path / "tether.yml").read_text()
    for bad in ("http://example.com/tether.json", "https://example.com/", "tether.json"):
        capsys.readouterr()
        words = [*base, "--client-metadata-url", bad, "more", "http://127.0.0.1:9/mcp"]
        assert main(words) == 1
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "Traceback" not in error
        assert "servers.more.client_metadata_url: must be the https:// address of a client" in error
        assert repr(bad) in error
        assert (tmp_path / "tether.yml").read_text() == kept
    capsys.readouterr()
    assert main([*base[:-2], "--client-metadata-url", good, "local", "--", "true"]) == 2
    assert "--client-metadata-url is for an HTTP server" in capsys.readouterr().err

    # Written by hand into the file, the bad value stops the configuration's load.
    (tmp_path / "tether.yml").write_text(kept.replace(good, "http://example.com/tether.json"))
    assert main(["--data-dir", str(tmp_path), "mcp", "list"]) == 2
    error = capsys.readouterr().err
    assert "servers.docs.client_metadata_url: must be the https:// address" in error
    assert "Traceback" not in error


# -- incremental scopes, refusals -------------------------------------------------------


async def _refused_for_scope(connection: McpConnection) -> None:
    """``erase`` needs "admin": an error naming the login that adds it, at once; no new
    authorization is started, and the server's other tools still answer on the same
    connection."""
    with pytest.raises(MCPError) as refused:
        async with asyncio.timeout(10):
            await _text(connection, "erase")
    advice = "run `tether mcp login web --scope admin`"
    assert refused.value.error.message == f"it needs the OAuth scope 'admin' for this: {advice}"
    assert _seen(await _text(connection, "grants_seen"))["codes"] == 1
    assert connection.lost is None


@pytest.mark.timeout(120)
async def test_step_up_names_the_login_that_adds_the_scope_and_login_asks_for_the_union(
    tmp_path: Path,
) -> None:
    home = tmp_path
    async with oauth_server(expires=3600) as url:
        await asyncio.to_thread(_add, home, url)
        assert "web: logged in" in await _login(home, "--scope", "read")
        async with _session(home, url) as connection:
            assert await _text(connection, "my_scopes") == "read"
            await _refused_for_scope(connection)

            # The login the error names; the running session uses the new grant.
            assert "web: logged in" in await _login(home, "--scope", "admin")
            assert await _text(connection, "my_scopes") == "read admin"
            assert await _text(connection, "erase") == "erased"
        # A login without --scope keeps asking for what was granted.
        assert "web: logged in" in await _login(home)
        assert await _call(home, url, "my_scopes") == "read admin"


@pytest.mark.timeout(120)
async def test_step_up_over_sse_is_the_same_error(tmp_path: Path) -> None:
    home = tmp_path
    async with oauth_server("--sse", expires=3600) as url:
        await asyncio.to_thread(_add, home, url, transport="sse")
        assert "web: logged in" in await _login(home, "--scope", "read")
        async with _session(home, url, transport="sse") as connection:
            await _refused_for_scope(connection)
            assert await _text(connection, "my_scopes") == "read"


@pytest.mark.timeout(120)
async def test_a_refused_authorization_ends_the_login_at_once_keeping_the_grant(
    tmp_path: Path,
) -> None:
    home = tmp_path
    async with oauth_server("--refuse-admin", expires=3600) as url:
        await asyncio.to_thread(_add, home, url)
        assert "web: logged in" in await _login(home, "--scope", "read")
        kept = token_path(home, "web").read_text()

        started = time.monotonic()
        printed = await _login(home, "--scope", "admin", authorized=False)
        assert time.monotonic() - started < 30  # the login's own wait is 5 minutes
        last = printed.strip().splitlines()[-1]
        assert last == "web: authorization refused: access_denied (the person said no)"
        assert "Traceback" not in printed and "OAuth flow error" not in printed
        # The earlier grant is as it was, and still works.
        assert token_path(home, "web").read_text() == kept
        assert os.listdir(token_path(home, "web").parent) == ["web.json"]
        assert await _call(home, url, "my_scopes") == "read"
