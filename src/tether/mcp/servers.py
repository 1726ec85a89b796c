"""Server entries: what an MCP server is, as tether is told about it.

Two sources produce the same values: ACP ``session/new`` / ``session/load``
``mcpServers`` (:func:`from_acp`) and the ``mcp`` plugin's configuration
(:func:`from_config`). Both are checked here once, so what reaches the
connection is always well-formed: a name, and either a command to run (stdio)
or a URL to reach (``http``: streamable HTTP, ``sse``: the older HTTP+SSE
transport).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from tether.mcp.errors import McpConfigError

__all__ = ["HttpServer", "ServerSpec", "StdioServer", "from_acp", "from_config"]

_EMPTY: Mapping[str, str] = MappingProxyType({})

_NAME = re.compile(r"^[^\x00-\x1f]{1,64}$")
"""A server's name: 1 to 64 printable characters (it is shown, and it names tools)."""


class StdioServer(msgspec.Struct, frozen=True):
    """A server tether starts as a process of the session's agent and talks to on stdio."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = _EMPTY
    """Set on top of the agent's tool environment (secrets scrubbed, see ``tether.fence``)."""
    cwd: str | None = None
    """Where the process runs; the session's cwd when unset."""

    def __hash__(self) -> int:
        # Without the environment, an unhashable mapping.
        return hash((self.name, self.command, self.args, self.cwd))


class HttpServer(msgspec.Struct, frozen=True):
    """A server reached over HTTP: ``transport`` ``http`` (streamable HTTP) or ``sse``."""

    name: str
    url: str
    transport: Literal["http", "sse"] = "http"
    headers: Mapping[str, str] = _EMPTY
    client_metadata_url: str | None = None
    """The ``https`` address of a client ID metadata document the user publishes: the
    OAuth client id where the authorization server takes such documents (configuration
    only; ACP has no field for it)."""

    def __hash__(self) -> int:
        # Without the headers, an unhashable mapping.
        return hash((self.name, self.url, self.transport))


ServerSpec = StdioServer | HttpServer


def from_acp(value: object) -> tuple[ServerSpec, ...]:
    """The ``mcpServers`` of an ACP request, checked.

    Each entry is a JSON object (or the SDK's model of one): stdio entries
    have ``name``, ``command``, ``args`` and ``env`` (a list of ``{name,
    value}``); ``http`` and ``sse`` entries have ``type``, ``name``, ``url`` and
    ``headers`` (a list of ``{name, value}``).

    Raises:
        McpConfigError: an entry is malformed, or two share a name; the
            message reads ``mcpServers[1].command: must be a non-empty string``.
    """
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise McpConfigError("mcpServers: must be an array of server objects")
    specs = [_acp_entry(f"mcpServers[{index}]", entry) for index, entry in enumerate(value)]
    return _distinct("mcpServers", specs)


def from_config(rows: Mapping[str, Mapping[str, object]], where: str) -> tuple[ServerSpec, ...]:
    """Servers of the ``mcp`` plugin's configuration: ``{name: {command, args, env, cwd}}``
    or ``{name: {type: http|sse, url, headers, client_metadata_url}}``.

    Raises:
        McpConfigError: an entry is malformed (the message starts with ``where``).
    """
    specs = []
    for name, row in rows.items():
        entry = dict(row)
        if "name" in entry:
            raise McpConfigError(f"{where}.{name}.name: the key is the server's name")
        entry["name"] = name
        kind = entry.get("type")
        specs.append(_entry(f"{where}.{name}", entry, kind, pairs=False))
    return _distinct(where, specs)


def _acp_entry(where: str, entry: object) -> ServerSpec:
    dump = getattr(entry, "model_dump", None)
    if callable(dump):  # the SDK already parsed it into one of its models
        entry = dump(by_alias=True, exclude_none=True)
    if not isinstance(entry, Mapping):
        raise McpConfigError(f"{where}: must be an object")
    return _entry(where, entry, entry.get("type"), pairs=True)


def _entry(where: str, entry: Mapping[str, object], kind: object, *, pairs: bool) -> ServerSpec:
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or not name.strip():
        raise McpConfigError(f"{where}.name: must be a non-empty string of at most 64 characters")
    if kind in (None, "stdio"):
        allowed = {"type", "name", "command", "args", "env", "cwd", "_meta"}
        _known(where, entry, allowed)
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip() or "\0" in command:
            raise McpConfigError(f"{where}.command: must be a non-empty string")
        cwd = entry.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")):
            raise McpConfigError(f"{where}.cwd: must be an absolute path")
        return StdioServer(
            name=name,
            command=command,
            args=_strings(f"{where}.args", entry.get("args", ())),
            env=_variables(f"{where}.env", entry.get("env", () if pairs else {}), pairs=pairs),
            cwd=cwd,
        )
    if kind in ("http", "sse"):
        return _http_entry(where, name, entry, kind, pairs=pairs)
    raise McpConfigError(f"{where}.type: must be 'stdio', 'http' or 'sse', got {kind!r}")


def _http_entry(
    where: str, name: str, entry: Mapping[str, object], kind: str, *, pairs: bool
) -> HttpServer:
    allowed = {"type", "name", "url", "headers", "_meta"}
    _known(where, entry, allowed if pairs else allowed | {"client_metadata_url"})
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise McpConfigError(f"{where}.url: must be an http:// or https:// URL")
    headers = _variables(f"{where}.headers", entry.get("headers", () if pairs else {}), pairs=pairs)
    document = entry.get("client_metadata_url")
    if document is not None:
        document = _document_url(f"{where}.client_metadata_url", document)
    return HttpServer(
        name=name,
        url=url,
        transport="http" if kind == "http" else "sse",
        headers=headers,
        client_metadata_url=document,
    )


def _document_url(where: str, value: object) -> str:
    """A client ID metadata document's address, as the SDK's OAuth client takes it
    (``https``, a path below the root) with a host and no fragment.

    Raises:
        McpConfigError: it is not such a URL.
    """
    if isinstance(value, str) and not any(c.isspace() or c == "\0" for c in value):
        from mcp.client.auth.utils import is_valid_client_metadata_url

        try:
            parts = urlsplit(value)
            host = parts.hostname
        except ValueError:  # a malformed authority, such as an unclosed [
            host = None
        if host and not parts.fragment and is_valid_client_metadata_url(value):
            return value
    raise McpConfigError(
        f"{where}: must be the https:// address of a client metadata document, "
        f"with a path (https://example.com/tether.json), got {value!r}"
    )


def _known(where: str, entry: Mapping[str, object], allowed: set[str]) -> None:
    unknown = sorted(str(key) for key in entry if key not in allowed)
    if unknown:
        raise McpConfigError(f"{where}: unknown field {unknown[0]!r}")


def _strings(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise McpConfigError(f"{where}: must be an array of strings")
    for index, item in enumerate(value):
        if not isinstance(item, str) or "\0" in item:
            raise McpConfigError(f"{where}[{index}]: must be a string")
    return tuple(value)


def _variables(where: str, value: object, *, pairs: bool) -> Mapping[str, str]:
    """``[{name, value}, ...]`` (ACP) or ``{name: value}`` (configuration)."""
    items: list[tuple[object, object]] = []
    if pairs:
        if not isinstance(value, Sequence) or isinstance(value, str | bytes):
            raise McpConfigError(f"{where}: must be an array of {{name, value}} objects")
        for index, item in enumerate(value):
            if not isinstance(item, Mapping) or set(item) - {"name", "value", "_meta"}:
                raise McpConfigError(f"{where}[{index}]: must be an object with name and value")
            items.append((item.get("name"), item.get("value")))
    else:
        if not isinstance(value, Mapping):
            raise McpConfigError(f"{where}: must be a mapping of names to strings")
        items = list(value.items())
    checked: dict[str, str] = {}
    for index, (key, text) in enumerate(items):
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise McpConfigError(f"{where}[{index}].name: must be a non-empty name without '='")
        if not isinstance(text, str) or "\0" in text:
            raise McpConfigError(f"{where}[{index}].value: must be a string")
        checked[key] = text
    return MappingProxyType(checked)


def _distinct(where: str, specs: list[ServerSpec]) -> tuple[ServerSpec, ...]:
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise McpConfigError(f"{where}: two servers are named {spec.name!r}")
        seen.add(spec.name)
    return tuple(specs)
