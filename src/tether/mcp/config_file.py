"""Adding and removing MCP servers in a composition overlay, keeping the rest of it.

An overlay (``$TETHER_HOME/tether.yml``, a project's ``tether.yml``) is
edited as text, at the places PyYAML's node marks point to: comments,
blank lines, key order and quoting elsewhere in the file are untouched. The
server itself is written as one line of JSON (which is YAML) under
``plugins: [{id: mcp, config: {servers: …}}]``; the row, its ``config`` and
its ``servers`` are added when missing, in the style (block or flow) of the
mapping or list they go into.

Every edit is checked by parsing its result: the servers must be the old
ones plus (or minus) the one named, and all must be valid entries
(:func:`~tether.mcp.servers.from_config`). An edit that would come out
otherwise is refused with :class:`ConfigEditError`, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.mcp.errors import McpConfigError
from tether.mcp.servers import from_config

if TYPE_CHECKING:
    from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = ["ConfigEditError", "add_server", "configured_servers", "remove_server"]

ROW_ID = "mcp"
"""The id of the ``mcp`` plugin's row in the bundled composition."""


class ConfigEditError(Exception):
    """The overlay cannot be edited as asked; the message is one line saying why."""


def configured_servers(text: str) -> dict[str, Any]:
    """The ``servers`` of the overlay's ``mcp`` row (``{}`` when it has none).

    Raises:
        ConfigEditError: the text is not YAML, or not a composition.
    """
    document = _load(text)
    row = _mcp_row(document)
    config = row.get("config") if row is not None else None
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigEditError("the mcp row's config is not a mapping")
    servers = config.get("servers")
    if servers is None:
        return {}
    if not isinstance(servers, Mapping):
        raise ConfigEditError("the mcp row's config.servers is not a mapping")
    return dict(servers)


def add_server(text: str, name: str, entry: Mapping[str, Any]) -> str:
    """``text`` with server ``name`` (``{command, args, env, cwd}`` or ``{type, url,
    headers}``) added to the ``mcp`` row's servers.

    Raises:
        ConfigEditError: the entry is invalid, the name is taken, or the file has
            a shape this edit does not handle (the message says which).
    """
    before = configured_servers(text)
    if name in before:
        raise ConfigEditError(f"a server named {name!r} is already configured here")
    _check({**before, name: dict(entry)})
    edited = _insert(text, name, json.dumps(dict(entry), ensure_ascii=False))
    _verify(edited, {**before, name: dict(entry)})
    return edited


def remove_server(text: str, name: str) -> str:
    """``text`` without server ``name``.

    Raises:
        ConfigEditError: no server has that name here, or the edit cannot be made.
    """
    before = configured_servers(text)
    if name not in before:
        raise ConfigEditError(f"no server named {name!r} is configured here")
    import yaml

    servers = _servers_node(yaml.compose(text))
    assert servers is not None  # configured_servers found the name
    edited = _delete(text, servers, name)
    after = dict(before)
    del after[name]
    _verify(edited, after)
    return edited


# -- reading ------------------------------------------------------------------------


def _load(text: str) -> object:
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigEditError(f"invalid YAML{where}: {problem}") from None
    if document is not None and not isinstance(document, Mapping):
        raise ConfigEditError("it is not a composition (a mapping with a plugins list)")
    return document


def _mcp_row(document: object) -> Mapping[str, Any] | None:
    if document is None:
        return None
    assert isinstance(document, Mapping)
    rows = document.get("plugins")
    if rows is None:
        return None
    if not isinstance(rows, list):
        raise ConfigEditError("its plugins is not a list")
    found = [row for row in rows if isinstance(row, Mapping) and row.get("id") == ROW_ID]
    if len(found) > 1:
        raise ConfigEditError("it has two rows with id mcp")
    return found[0] if found else None


def _check(servers: Mapping[str, Any]) -> None:
    try:
        from_config(servers, "servers")
    except McpConfigError as exc:
        raise ConfigEditError(str(exc)) from None


def _verify(edited: str, expected: Mapping[str, Any]) -> None:
    try:
        got = configured_servers(edited)
    except ConfigEditError as exc:
        raise ConfigEditError(f"the edit would break the file ({exc}); edit it by hand") from None
    if got != dict(expected):
        raise ConfigEditError("the edit did not come out as intended; edit the file by hand")


# -- nodes --------------------------------------------------------------------------


def _value(mapping: MappingNode, key: str) -> Node | None:
    for key_node, value_node in mapping.value:
        if key_node.value == key:
            found: Node = value_node
            return found
    return None


def _row_node(root: Node | None) -> tuple[SequenceNode | None, MappingNode | None]:
    from yaml.nodes import MappingNode, SequenceNode

    if not isinstance(root, MappingNode):
        return None, None
    plugins = _value(root, "plugins")
    if not isinstance(plugins, SequenceNode):
        return None, None
    for item in plugins.value:
        if isinstance(item, MappingNode):
            row_id = _value(item, "id")
            if row_id is not None and row_id.value == ROW_ID:
                return plugins, item
    return plugins, None


def _servers_node(root: Node | None) -> MappingNode | None:
    from yaml.nodes import MappingNode

    _, row = _row_node(root)
    config = _value(row, "config") if row is not None else None
    servers = _value(config, "servers") if isinstance(config, MappingNode) else None
    return servers if isinstance(servers, MappingNode) else None


def _last_end(node: Node) -> int:
    """Where the last scalar (or flow collection) of ``node`` ends: a block
    collection's own end mark lies past trailing comments, at the next token."""
    from yaml.nodes import ScalarNode

    if isinstance(node, ScalarNode) or getattr(node, "flow_style", False) or not node.value:
        return int(node.end_mark.index)
    last = node.value[-1]
    return _last_end(last[1] if isinstance(last, tuple) else last)


# -- editing ------------------------------------------------------------------------


def _insert(text: str, name: str, entry: str) -> str:
    import yaml
    from yaml.nodes import MappingNode

    root = yaml.compose(text)
    plugins, row = _row_node(root)
    key = _key(name)
    if row is None:
        lines = ["- id: mcp", "  config:", "    servers:", f"      {key}: {entry}"]
        if plugins is None:
            if isinstance(root, MappingNode) and _value(root, "plugins") is not None:
                raise ConfigEditError("its plugins value is empty; write plugins: [] or a row")
            block = "\n".join(["plugins:", *(f"  {line}" for line in lines)])
            return _append(text, block)
        return _add_item(
            text, plugins, lines, f'{{"id": "mcp", "config": {{"servers": {{{key}: {entry}}}}}}}'
        )
    config = _value(row, "config")
    if config is None:
        return _add_key(
            text,
            row,
            ["config:", "  servers:", f"    {key}: {entry}"],
            f'"config": {{"servers": {{{key}: {entry}}}}}',
        )
    if not isinstance(config, MappingNode):
        raise ConfigEditError("the mcp row's config is empty or not a mapping; edit it by hand")
    servers = _value(config, "servers")
    if servers is None:
        return _add_key(
            text, config, ["servers:", f"  {key}: {entry}"], f'"servers": {{{key}: {entry}}}'
        )
    if not isinstance(servers, MappingNode):
        raise ConfigEditError("the mcp row's servers is empty or not a mapping; edit it by hand")
    return _add_key(text, servers, [f"{key}: {entry}"], f"{key}: {entry}")


def _key(name: str) -> str:
    """``name`` as a mapping key: bare when YAML reads it back as the same string."""
    import yaml

    bare = name.isprintable() and name.strip() == name and "#" not in name
    try:
        if bare and yaml.safe_load(f"{name}: 0") == {name: 0}:
            return name
    except yaml.YAMLError:
        pass
    return json.dumps(name, ensure_ascii=False)


def _append(text: str, block: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{block}\n"


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def _add_item(text: str, sequence: SequenceNode, lines: list[str], flow: str) -> str:
    if sequence.flow_style or not sequence.value:
        return _into_flow(text, sequence, flow)
    indent = " " * max(0, int(sequence.value[0].start_mark.column) - 2)
    at = _line_end(text, _last_end(sequence))
    return text[:at] + "".join(f"\n{indent}{line}" for line in lines) + text[at:]


def _add_key(text: str, mapping: MappingNode, lines: list[str], flow: str) -> str:
    if mapping.flow_style or not mapping.value:
        return _into_flow(text, mapping, flow)
    indent = " " * int(mapping.value[0][0].start_mark.column)
    at = _line_end(text, _last_end(mapping))
    return text[:at] + "".join(f"\n{indent}{line}" for line in lines) + text[at:]


def _into_flow(text: str, node: Node, item: str) -> str:
    """``item`` added before the closing bracket of a flow collection."""
    end = int(node.end_mark.index) - 1
    if not getattr(node, "flow_style", False) or text[end] not in "]}":
        raise ConfigEditError("an empty block collection cannot be edited; edit it by hand")
    separator = ", " if node.value else ""
    return text[:end] + separator + item + text[end:]


def _delete(text: str, servers: MappingNode, name: str) -> str:
    index = next(i for i, (key, _) in enumerate(servers.value) if key.value == name)
    key_node, value_node = servers.value[index]
    start, end = int(key_node.start_mark.index), _last_end(value_node)
    if servers.flow_style:
        if index + 1 < len(servers.value):
            end = int(servers.value[index + 1][0].start_mark.index)
        elif index > 0:
            start = _last_end(servers.value[index - 1][1])
        return text[:start] + text[end:]
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip():
        raise ConfigEditError("the server shares its line with other keys; edit it by hand")
    cut = text[:line_start] + text[_line_end(text, end) + 1 :]
    if len(servers.value) > 1:
        return cut
    # The last server: `servers:` alone would be null, so it becomes `servers: {}`.
    return _empty_servers(cut)


def _empty_servers(text: str) -> str:
    import yaml

    _, row = _row_node(yaml.compose(text))
    config = _value(row, "config") if row is not None else None
    assert config is not None
    for key_node, _ in config.value:
        if key_node.value == "servers":
            colon = text.index(":", int(key_node.end_mark.index))
            return text[: colon + 1] + " {}" + text[colon + 1 :]
    raise ConfigEditError("the edit did not come out as intended; edit the file by hand")
