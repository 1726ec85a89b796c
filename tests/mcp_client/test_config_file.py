"""Adding and removing servers in an overlay keeps everything else of the file."""

from __future__ import annotations

import pytest
import yaml

from tether.mcp.config_file import (
    ConfigEditError,
    add_server,
    configured_servers,
    remove_server,
)

COMMENTED = """\
# my settings
plugins:
  # the model
  - id: agent_loop
    config: {model: "deepseek:deepseek-chat"}   # keep this
  - id: mcp
    config:
      startup_timeout_ms: 5000
      servers:
        files: {command: npx, args: [-y, files]}  # a comment on the server
      # after the servers
other: 1
"""


def test_add_keeps_comments_and_other_rows() -> None:
    edited = add_server(COMMENTED, "time", {"command": "uvx", "args": ["mcp-server-time"]})
    for line in COMMENTED.splitlines():
        assert line in edited.splitlines()
    document = yaml.safe_load(edited)
    assert document["other"] == 1
    assert document["plugins"][0]["config"]["model"] == "deepseek:deepseek-chat"
    assert document["plugins"][1]["config"]["startup_timeout_ms"] == 5000
    assert configured_servers(edited) == {
        "files": {"command": "npx", "args": ["-y", "files"]},
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
    }


def test_remove_keeps_the_rest_and_the_last_leaves_an_empty_mapping() -> None:
    two = add_server(COMMENTED, "web", {"type": "http", "url": "http://127.0.0.1:1/mcp"})
    one = remove_server(two, "files")
    assert "# a comment on the server" not in one
    assert "# after the servers" in one and "# keep this" in one
    assert configured_servers(one) == {"web": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}
    none = remove_server(one, "web")
    assert configured_servers(none) == {}
    assert yaml.safe_load(none)["plugins"][1]["config"] == {
        "startup_timeout_ms": 5000,
        "servers": {},
    }


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", None),
        ("# only a comment\n", None),
        ("plugins:\n  - id: agent_loop\n    config: {max_steps: 3}\n", 0),
        ("plugins:\n- id: agent_loop\n", 0),
        ("plugins: []\n", None),
        ("plugins:\n  - id: mcp\n    plugin: tether.mcp.plugin\n", None),
        ("plugins:\n  - id: mcp\n    config:\n      state_dir: /tmp\n", None),
        ("plugins: [{id: mcp, config: {servers: {a: {command: y}}}}]\n", None),
    ],
)
def test_add_into_every_shape(text: str, where: int | None) -> None:
    before = configured_servers(text)
    edited = add_server(text, "new", {"command": "run-me", "env": {"A": "1"}})
    assert configured_servers(edited) == {**before, "new": {"command": "run-me", "env": {"A": "1"}}}
    if where is not None:
        assert yaml.safe_load(edited)["plugins"][where] == yaml.safe_load(text)["plugins"][where]
    assert remove_server(edited, "new") != edited
    assert configured_servers(remove_server(edited, "new")) == before


def test_flow_style_removal() -> None:
    text = "plugins: [{id: mcp, config: {servers: {a: {command: y}, b: {command: z}}}}]\n"
    assert configured_servers(remove_server(text, "a")) == {"b": {"command": "z"}}
    assert configured_servers(remove_server(text, "b")) == {"a": {"command": "y"}}


def test_an_odd_name_is_quoted() -> None:
    edited = add_server("", "yes", {"command": "x"})
    assert configured_servers(edited) == {"yes": {"command": "x"}}
    assert '"yes":' in edited


@pytest.mark.parametrize(
    ("text", "name", "entry", "message"),
    [
        ("plugins: 3\n", "x", {"command": "x"}, "its plugins is not a list"),
        ("- a\n", "x", {"command": "x"}, "not a composition"),
        ("plugins: [\n", "x", {"command": "x"}, "invalid YAML at line 2, column 1: expected"),
        (COMMENTED, "files", {"command": "x"}, "already configured"),
        ("", "x", {"type": "http", "url": "ftp://host"}, "servers.x.url: must be an http"),
        ("", "x", {"command": ""}, "servers.x.command: must be a non-empty string"),
    ],
)
def test_add_refusals(text: str, name: str, entry: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigEditError, match=message):
        add_server(text, name, entry)


def test_remove_an_unknown_name() -> None:
    with pytest.raises(ConfigEditError, match="no server named 'nope'"):
        remove_server(COMMENTED, "nope")
