"""The network allow-list: real confined commands reach listed hosts through tether's proxy only.

Every command runs through the shell executor under a ``network:
allow-list`` policy, in its own network namespace. The "hosts" are names
the proxy's resolver maps to a test HTTP server on the host's 127.0.0.1:
no traffic leaves the machine. Each test asserts what the server saw (or
did not see), not only what the command printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.shell.support import require_landlock
from tether.plugins.tool_bash import render_result
from tether.runtime.schema import SchemaError, decode
from tether.shell import LocalShell, ShellExecRequest, ShellResult, confinement
from tether.shell.proxy import HostRule, allowed, parse_head
from tether.shell.sandbox import Network, Sandbox, SandboxPolicy, SandboxSettings

OWNER = "agent-1"


class Origin:
    """A tiny HTTP server on the host's 127.0.0.1 that records each request head."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            body = b"HELLO-FROM-ORIGIN\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def origin() -> AsyncIterator[Origin]:
    served = Origin()
    server = await asyncio.start_server(served.handle, "127.0.0.1", 0)
    served.port = server.sockets[0].getsockname()[1]
    async with server:
        yield served


def resolve(host: str) -> str:
    """Every ``.test`` name is the host's loopback; anything else would go out (never asked)."""
    assert host.endswith(".test"), f"the proxy was asked to resolve {host!r}"
    return "127.0.0.1"


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    require_landlock()
    if not confinement.namespaces_work():
        pytest.skip("no user namespaces here: allow-list falls back to network off")


async def allow_list(tmp_path: Path, *hosts: str) -> Sandbox:
    settings = SandboxSettings(network=Network.ALLOW_LIST, allowed_hosts=hosts)
    return Sandbox(settings, str(tmp_path), resolve=resolve)


async def run(shell: LocalShell, policy: SandboxPolicy, command: str, cwd: Path) -> ShellResult:
    request = ShellExecRequest(command, cwd=str(cwd), sandbox=policy, timeout_ms=20_000)
    return await shell.run(shell.resolve(request))


async def test_an_allowed_host_is_reached_through_the_proxy_by_http_and_connect(
    shell: LocalShell, tmp_path: Path
) -> None:
    async with origin() as server:
        sandbox = await allow_list(tmp_path, f"allowed.test:{server.port}")
        policy = sandbox.policy_for(str(tmp_path), OWNER)
        url = f"http://allowed.test:{server.port}/hello?x=1"
        plain = await run(shell, policy, f"curl -sS --max-time 10 '{url}'", tmp_path)
        tunnel = await run(shell, policy, f"curl -sS -p --max-time 10 '{url}'", tmp_path)
        await sandbox.aclose()

    assert plain.stdout == "HELLO-FROM-ORIGIN\n", plain.stderr
    assert tunnel.stdout == "HELLO-FROM-ORIGIN\n", tunnel.stderr
    assert [head.split(b"\r\n")[0] for head in server.heads] == [b"GET /hello?x=1 HTTP/1.1"] * 2
    assert f"\r\nHost: allowed.test:{server.port}\r\n".encode() in server.heads[0]
    assert sandbox.refused(OWNER) == ()


async def test_a_python_client_finds_the_proxy_in_its_environment(
    shell: LocalShell, tmp_path: Path
) -> None:
    async with origin() as server:
        sandbox = await allow_list(tmp_path, f"*.allowed.test:{server.port}")
        policy = sandbox.policy_for(str(tmp_path), OWNER)
        script = (
            "import os, urllib.request; print(os.environ['HTTPS_PROXY'], os.environ['NO_PROXY']); "
            f"print(urllib.request.urlopen('http://api.allowed.test:{server.port}/py').read())"
        )
        result = await run(shell, policy, f'{sys.executable} -c "{script}"', tmp_path)
        await sandbox.aclose()

    assert result.stdout.startswith("http://127.0.0.1:3128 localhost,127.0.0.1,::1\n")
    assert "HELLO-FROM-ORIGIN" in result.stdout, result.stderr
    assert server.heads[0].startswith(b"GET /py HTTP/1.1")


async def test_a_host_not_listed_is_refused_with_403_and_the_refusal_is_reported(
    shell: LocalShell, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with origin() as server:
        sandbox = await allow_list(tmp_path, f"allowed.test:{server.port}")
        policy = sandbox.policy_for(str(tmp_path), OWNER)
        port = server.port
        result = await run(
            shell,
            policy,
            f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://other.test:{port}/; "
            f"curl -sS -p http://other.test:{port}/ 2>&1; "
            f"curl -sS -o /dev/null -w '%{{http_code}}\\n' http://allowed.test:{port + 1}/",
            tmp_path,
        )
        refused = sandbox.refused(OWNER)
        await sandbox.aclose()

    assert server.heads == []
    lines = result.stdout.splitlines()
    assert lines[0] == "403" and lines[-1] == "403"
    assert "403" in lines[1]
    assert refused == (f"other.test:{port}", f"allowed.test:{port + 1}")
    shown = render_result(result, 20_000, refused)
    assert f"the network proxy refused other.test:{port}, allowed.test:{port + 1}" in shown
    assert "network allow-list: allowed.test:" in shown
    assert "the network proxy refused other.test" in caplog.text


async def test_a_direct_connection_bypassing_the_proxy_fails(
    shell: LocalShell, tmp_path: Path
) -> None:
    async with origin() as server:
        sandbox = await allow_list(tmp_path, f"allowed.test:{server.port}", "localhost")
        policy = sandbox.policy_for(str(tmp_path), OWNER)
        result = await run(
            shell,
            policy,
            f"curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{server.port}/ && echo DIRECT; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{server.port}) && echo REACHED-LOOPBACK; "
            "(exec 3<>/dev/tcp/1.1.1.1/53) && echo REACHED-RESOLVER; "
            "(exec 3<>/dev/udp/1.1.1.1/53) && echo REACHED-UDP; "
            "getent hosts example.com && echo RESOLVED",
            tmp_path,
        )
        await sandbox.aclose()

    assert server.heads == []
    assert "DIRECT" not in result.stdout and "REACHED" not in result.stdout
    assert "RESOLVED" not in result.stdout


async def until(condition: Callable[[], bool]) -> None:
    """Wait (at most 10 s) for ``condition``, which the event loop's callbacks make true."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in 10 s")


async def test_the_proxy_stops_serving_a_process_that_ended(
    shell: LocalShell, tmp_path: Path
) -> None:
    sandbox = await allow_list(tmp_path, "allowed.test")
    policy = sandbox.policy_for(str(tmp_path), OWNER)
    proxy = sandbox._proxy
    assert proxy is not None
    result = await run(shell, policy, "true", tmp_path)
    assert result.exit_code == 0
    await until(lambda: proxy.serving() == 0)
    await sandbox.aclose()


async def test_closing_the_sandbox_cuts_open_connections_and_removes_the_proxy(
    shell: LocalShell, tmp_path: Path
) -> None:
    async with origin() as server:
        sandbox = await allow_list(tmp_path, f"allowed.test:{server.port}")
        policy = sandbox.policy_for(str(tmp_path), OWNER)
        proxy = sandbox._proxy
        assert proxy is not None and policy.proxy is not None
        command = (
            "exec 3<>/dev/tcp/127.0.0.1/3128; "
            f"printf 'CONNECT allowed.test:{server.port} HTTP/1.1\\r\\n\\r\\n' >&3; "
            "head -c 12 <&3; echo; sleep 30"
        )
        request = ShellExecRequest(command, cwd=str(tmp_path), sandbox=policy)
        task = await shell.start(shell.resolve(request))
        seen: list[str] = []

        def answered() -> bool:
            seen.append(shell.read_output(task.id).stdout)
            return "HTTP/1.1 200" in "".join(seen)

        await until(answered)
        assert proxy.serving() == 1 and proxy.connections() == 1
        await sandbox.aclose()
        assert proxy.connections() == 0 and proxy.serving() == 0
        assert not Path(policy.proxy).exists()  # noqa: ASYNC240 (one stat)
        await shell.kill(task.id)


def test_host_rules_match_names_suffixes_and_ports() -> None:
    rules = tuple(HostRule.parse(text) for text in ("pypi.org", "*.npmjs.org", "Git.Example:8443"))
    assert allowed(rules, "pypi.org", 443) and allowed(rules, "PyPI.org.", 80)
    assert not allowed(rules, "pypi.org", 8080)
    assert not allowed(rules, "evilpypi.org", 443) and not allowed(rules, "pypi.org.evil", 443)
    assert allowed(rules, "registry.npmjs.org", 443) and not allowed(rules, "npmjs.org", 443)
    assert allowed(rules, "git.example", 8443) and not allowed(rules, "git.example", 443)


def test_a_bad_allowed_host_is_refused_naming_it() -> None:
    with pytest.raises(SchemaError, match=r"allowed_hosts\.1: .*'\*bad'"):
        decode(SandboxSettings, {"network": "allow-list", "allowed_hosts": ["ok.org", "*bad"]})
    settings = decode(SandboxSettings, {"network": True})
    assert settings.network_access is Network.ON


def test_request_heads_are_parsed_and_rewritten() -> None:
    tunnel = parse_head(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert (tunnel.host, tunnel.port, tunnel.tunnel) == ("pypi.org", 443, True)
    plain = parse_head(
        b"GET http://a.test:8080/p?q=1 HTTP/1.1\r\nHost: elsewhere.example\r\nAccept: */*\r\n"
        b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n"
    )
    assert (plain.host, plain.port, plain.tunnel) == ("a.test", 8080, False)
    assert plain.head == (
        b"GET /p?q=1 HTTP/1.1\r\nHost: a.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    with pytest.raises(ValueError, match="absolute http"):
        parse_head(b"GET /relative HTTP/1.1\r\n\r\n")
