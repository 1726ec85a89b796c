"""``tether mcp``: list, add, remove, test, log in to and out of the configured MCP servers.

The servers are those of the ``mcp`` row of the composition (the user
config, then each ``--config`` overlay; see ``docs/mcp.md``). ``add`` and
``remove`` edit one overlay file (the user config unless ``--file`` names
another, such as a project's ``tether.yml``) through
:mod:`tether.mcp.config_file`, which keeps the rest of the file as it was;
the file is replaced atomically, keeping its mode (0600 for a new one).

``test`` and ``list`` start each server as a session would (owned: its
process group is recorded, and it is stopped before the command returns),
list its tools, and stop it. Each server is one line (its tools and the MCP
version agreed); a failure is one line saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.cli.boot import UsageError, composed, data_dir_of

if TYPE_CHECKING:
    from tether.cli.main import _Commands
    from tether.mcp.connection import McpSettings
    from tether.mcp.servers import HttpServer, ServerSpec

EXIT_OK = 0
EXIT_FAILED = 1


def add_mcp_parser(commands: _Commands, help_text: str) -> None:
    """``tether mcp`` and its actions."""
    mcp = commands.add_parser("mcp", help=help_text, description=__doc__.split("\n\n")[1])
    actions = mcp.add_subparsers(dest="mcp_command", metavar="ACTION")
    actions.required = True
    actions.add_parser("list", help="the configured servers: transport, target, and a check")
    add = actions.add_parser(
        "add",
        help="add a server to a config file",
        description="Add a stdio server (tether mcp add [OPTIONS] NAME -- COMMAND ARGS...) "
        "or an HTTP one (tether mcp add --transport http [--header 'NAME: VALUE'] "
        "[--client-metadata-url URL] NAME URL). "
        "Options go before NAME.",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("target", nargs=argparse.REMAINDER, metavar="COMMAND|URL")
    add.add_argument("--transport", choices=("stdio", "http", "sse"), default="stdio")
    add.add_argument("--env", "-e", action="append", default=[], metavar="NAME=VALUE")
    add.add_argument("--header", "-H", action="append", default=[], metavar="'NAME: VALUE'")
    add.add_argument("--cwd", metavar="DIR", help="where a stdio server runs (absolute)")
    add.add_argument(
        "--client-metadata-url",
        metavar="URL",
        help="an HTTP server's OAuth client id: the https address of a client metadata "
        "document you publish (used where the authorization server takes such documents)",
    )
    remove = actions.add_parser("remove", help="remove a server from a config file")
    remove.add_argument("name", metavar="NAME")
    for action in (add, remove):
        action.add_argument(
            "--file",
            type=Path,
            metavar="FILE",
            help="the config file to edit (default: the user config, $TETHER_HOME/tether.yml)",
        )
    test = actions.add_parser("test", help="start a server, list its tools, stop it")
    test.add_argument("name", metavar="NAME")
    login = actions.add_parser(
        "login", help="authorize tether with an HTTP server (OAuth), keeping its tokens"
    )
    login.add_argument("name", metavar="NAME")
    login.add_argument("--no-browser", action="store_true", help="print the authorization URL only")
    login.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="'A B'",
        help="OAuth scopes to ask for on top of those already granted (space-separated)",
    )
    logout = actions.add_parser("logout", help="revoke and forget an HTTP server's tokens")
    logout.add_argument("name", metavar="NAME")


def mcp_command(args: argparse.Namespace) -> int:
    """Run ``tether mcp ACTION``; returns the exit code."""
    if args.mcp_command == "add":
        return _edit(args, adding=True)
    if args.mcp_command == "remove":
        return _edit(args, adding=False)
    specs, settings = _configured(args)
    if args.mcp_command in ("test", "login", "logout"):
        chosen = [spec for spec in specs if spec.name == args.name]
        if not chosen:
            raise UsageError(f"no MCP server named {args.name!r} is configured")
        specs = tuple(chosen)
        if args.mcp_command != "test":
            return _login(args, specs[0], settings)
    elif not specs:
        print("no MCP servers are configured; `tether mcp add` adds one", file=sys.stderr)
        return EXIT_OK
    results = asyncio.run(_check_all(specs, settings, data_dir_of(args)))
    width = max(len(spec.name) for spec in specs)
    for spec, (_, text) in zip(specs, results, strict=True):
        print(f"{spec.name:<{width}}  {_transport(spec):<5}  {_target(spec)}  {text}")
    return EXIT_OK if all(ok for ok, _ in results) else EXIT_FAILED


# -- add and remove -----------------------------------------------------------------


def _edit(args: argparse.Namespace, *, adding: bool) -> int:
    from tether.mcp.config_file import ConfigEditError, add_server, remove_server

    path: Path = args.file or data_dir_of(args) / "tether.yml"
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        print(f"tether: {path} could not be read: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not adding and not text:
        print(f"tether: {path}: no server named {args.name!r} is configured here", file=sys.stderr)
        return EXIT_FAILED
    try:
        edited = (
            add_server(text, args.name, _entry(args)) if adding else remove_server(text, args.name)
        )
    except ConfigEditError as exc:
        print(f"tether: {path}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        _write(path, edited)
    except OSError as exc:
        print(f"tether: {path} could not be written: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{'added' if adding else 'removed'} {args.name} in {path}", file=sys.stderr)
    return EXIT_OK


def _entry(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration entry ``add``'s arguments describe.

    Raises:
        UsageError: a missing target, or a malformed ``--env`` / ``--header``.
    """
    target = list(args.target)
    if target[:1] == ["--"]:
        del target[0]
    elif target and target[0].startswith("-"):
        raise UsageError(f"mcp add: {target[0]}: options go before NAME (tether mcp add -h)")
    if not target:
        raise UsageError("mcp add: give the server's command (after --) or its URL")
    if args.transport != "stdio":
        if len(target) != 1 or args.env or args.cwd:
            raise UsageError("mcp add: an HTTP server takes one URL (and --header), no command")
        entry: dict[str, Any] = {"type": args.transport, "url": target[0]}
        if args.header:
            entry["headers"] = _pairs(args.header, ":", "--header")
        if args.client_metadata_url is not None:
            entry["client_metadata_url"] = args.client_metadata_url
        return entry
    for option, given in (
        ("--header", args.header),
        ("--client-metadata-url", args.client_metadata_url),
    ):
        if given:
            raise UsageError(f"mcp add: {option} is for an HTTP server (--transport http or sse)")
    entry = {"command": target[0]}
    if target[1:]:
        entry["args"] = target[1:]
    if args.env:
        entry["env"] = _pairs(args.env, "=", "--env")
    if args.cwd:
        entry["cwd"] = args.cwd
    return entry


def _pairs(values: list[str], separator: str, option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        key, found, text = value.partition(separator)
        if not found or not key.strip():
            raise UsageError(f"mcp add: {option} {value!r}: expected NAME{separator}VALUE")
        pairs[key.strip()] = text.strip() if separator == ":" else text
    return pairs


def _write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, keeping its mode (0600 when new)."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        temp.unlink(missing_ok=True)
        raise


# -- list and test ------------------------------------------------------------------


def _configured(args: argparse.Namespace) -> tuple[tuple[ServerSpec, ...], McpSettings]:
    """The servers of the composed ``mcp`` row for every agent, and its limits.

    Raises:
        UsageError: the row's configuration is not valid.
    """
    from tether.mcp.plugin import Config
    from tether.runtime.schema import SchemaError, decode

    document = composed(args, with_model=False)
    rows = document.get("plugins") if isinstance(document, Mapping) else None
    row = next((r for r in rows or () if isinstance(r, Mapping) and r.get("id") == "mcp"), None)
    if row is None or row.get("disabled"):
        return (), Config().settings
    try:
        config = decode(Config, row.get("config") or {}, root="mcp.config")
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    from tether.mcp.servers import from_config

    return from_config(config.servers, "servers"), config.settings


class _Tester:
    """The owner of the servers a command starts to test them."""

    id = "mcp-test"


async def _check_all(
    specs: tuple[ServerSpec, ...], settings: McpSettings, data: Path
) -> list[tuple[bool, str]]:
    from tether.shell.guard import OrphanGuard
    from tether.shell.orphans import state_path

    guard = OrphanGuard(state_path(data / "run"))
    guard.sweep()
    try:
        return list(await asyncio.gather(*(_check(spec, settings, guard) for spec in specs)))
    finally:
        await guard.close()


async def _check(spec: ServerSpec, settings: McpSettings, guard: Any) -> tuple[bool, str]:
    """Start ``spec``, list its tools, stop it: ``(True, "ok: …")`` or ``(False, why)``."""
    from tether.mcp.connection import McpConnection
    from tether.mcp.errors import McpStartError
    from tether.mcp.plugin import auth_of

    connection = McpConnection(
        spec, settings, cwd=os.getcwd(), guard=guard, owner=_Tester(), auth=auth_of(spec)
    )
    try:
        tools = await connection.start()
    except McpStartError as exc:
        return False, f"failed: {exc}"
    finally:
        await connection.close()
    names = ", ".join(tool.name for tool in tools[:_SHOWN])
    more = f", +{len(tools) - _SHOWN} more" if len(tools) > _SHOWN else ""
    listed = f"ok: {len(tools)} tool(s){': ' + names + more if names else ''}"
    return True, f"{listed} (MCP {connection.protocol_version})"


def _login(args: argparse.Namespace, spec: ServerSpec, settings: McpSettings) -> int:
    """``login``: a new OAuth grant, kept for the sessions; ``logout``: revoked, forgotten."""
    from tether.mcp.oauth import logout, token_path
    from tether.mcp.servers import HttpServer

    if not isinstance(spec, HttpServer):
        raise UsageError(f"{spec.name!r} is a stdio server: OAuth is for HTTP servers")
    home = data_dir_of(args)
    if args.mcp_command == "logout":
        print(f"{spec.name}: {asyncio.run(logout(home, spec.name))}")
        return EXIT_OK
    scope = " ".join(" ".join(args.scope).split()) or None
    ok, text = asyncio.run(
        _authorize(spec, settings, home, browser=not args.no_browser, scope=scope)
    )
    if ok:
        text = f"{text}; tokens kept in {token_path(home, spec.name)}"
    print(f"{spec.name}: {text}")
    return EXIT_OK if ok else EXIT_FAILED


LOGIN_WAIT = 300.0
"""How long ``tether mcp login`` waits for the person to authorize (seconds)."""


async def _authorize(
    spec: HttpServer, settings: McpSettings, home: Path, *, browser: bool, scope: str | None
) -> tuple[bool, str]:
    """A new grant for ``spec`` (asking for ``scope`` on top of what was granted), checked
    by listing the server's tools: ``(True, "logged in …")`` or ``(False, why)``."""
    import msgspec

    from tether.mcp.connection import McpConnection
    from tether.mcp.errors import McpStartError
    from tether.mcp.oauth import login_provider

    def show(url: str) -> None:
        print(f"Open this address to authorize tether with {spec.name!r}:\n{url}", flush=True)
        if browser:
            import webbrowser

            with contextlib.suppress(Exception):
                webbrowser.open(url)

    waiting = msgspec.structs.replace(
        settings, startup_timeout=max(settings.startup_timeout, LOGIN_WAIT)
    )
    document = spec.client_metadata_url
    async with login_provider(
        home, spec.name, spec.url, show, document=document, scope=scope
    ) as login:
        connection = McpConnection(
            spec, waiting, cwd=os.getcwd(), guard=None, owner=_Tester(), auth=login.auth
        )
        try:
            tools = await connection.start()
        except McpStartError as exc:
            if login.refusal is not None:
                return False, f"authorization refused: {login.refusal}"
            return False, f"failed: {exc}"
        finally:
            await connection.close()
        login.keep()
    return True, f"logged in ({len(tools)} tool(s), MCP {connection.protocol_version})"


_SHOWN = 6
"""How many tool names a server's line shows."""


def _transport(spec: ServerSpec) -> str:
    from tether.mcp.servers import HttpServer

    return spec.transport if isinstance(spec, HttpServer) else "stdio"


def _target(spec: ServerSpec) -> str:
    from tether.mcp.servers import HttpServer

    if isinstance(spec, HttpServer):
        return spec.url
    import shlex

    return shlex.join([spec.command, *spec.args])
