"""Server entries, tool names, argument schemas and results: the values, without processes."""

from __future__ import annotations

import base64

import pytest
from mcp import types

from tests.plugins.fs_support import PNG_1X1
from tether.content import MAX_IMAGE_BYTES, ImageRef
from tether.mcp.errors import McpConfigError
from tether.mcp.servers import HttpServer, StdioServer, from_acp, from_config
from tether.mcp.tools import arguments_model, render_result, tool_name
from tether.tools.arguments import ArgumentsError, arguments_schema, parse


def test_acp_entries_of_every_transport_are_read() -> None:
    specs = from_acp(
        [
            {"name": "a", "command": "srv", "args": ["-x"], "env": [{"name": "K", "value": "v"}]},
            {"type": "http", "name": "b", "url": "https://h/mcp", "headers": []},
            {
                "type": "sse",
                "name": "c",
                "url": "http://h/sse",
                "headers": [{"name": "A", "value": "1"}],
            },
        ]
    )
    assert specs[0] == StdioServer("a", "srv", ("-x",), env={"K": "v"})
    assert dict(specs[0].env) == {"K": "v"}
    assert specs[1] == HttpServer("b", "https://h/mcp", "http")
    assert isinstance(specs[2], HttpServer) and dict(specs[2].headers) == {"A": "1"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("servers", "mcpServers: must be an array"),
        ([{"name": "a", "command": "x", "args": "-v"}], "mcpServers[0].args: must be an array"),
        ([{"name": "a", "command": "x", "env": [{"name": "A=B", "value": "1"}]}], "env[0].name"),
        ([{"name": "a", "command": "x", "env": [{"name": "A", "value": 1}]}], "env[0].value"),
        ([{"name": "a", "command": "x", "cwd": "rel"}], "mcpServers[0].cwd: must be an absolute"),
        ([{"name": "a", "command": "x", "colour": "red"}], "unknown field 'colour'"),
        ([{"name": "a" * 65, "command": "x"}], "mcpServers[0].name"),
        (
            [{"name": "a", "command": "x"}, {"name": "a", "url": "http://h", "type": "http"}],
            "two servers are named 'a'",
        ),
    ],
)
def test_a_malformed_acp_entry_names_its_place(value: object, message: str) -> None:
    with pytest.raises(McpConfigError) as raised:
        from_acp(value)
    assert message in str(raised.value)


def test_configured_entries_are_keyed_by_name_with_plain_mappings() -> None:
    (spec,) = from_config({"db": {"command": "sqlite-mcp", "env": {"A": "1"}}}, "servers")
    assert spec == StdioServer("db", "sqlite-mcp", env={"A": "1"})
    with pytest.raises(McpConfigError, match=r"servers\.db\.env: must be a mapping"):
        from_config({"db": {"command": "x", "env": [{"name": "A", "value": "1"}]}}, "servers")


def test_tool_names_are_safe_for_every_provider_and_stay_distinct() -> None:
    assert tool_name("files", "read") == "mcp__files__read"
    assert tool_name("My Files", "read.file") == "mcp__My_Files__read_file"
    long_a, long_b = tool_name("s", "x" * 80 + "a"), tool_name("s", "x" * 80 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b


def test_arguments_are_shown_and_checked_with_the_server_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    model = arguments_model(schema)
    assert arguments_schema(model) == schema
    assert parse(model, {"n": 3}).root == {"n": 3}  # type: ignore[attr-defined]
    with pytest.raises(ArgumentsError, match="n: 'x' is not of type 'integer'"):
        parse(model, {"n": "x"})
    with pytest.raises(ArgumentsError, match="'n' is a required property"):
        parse(model, {})


@pytest.mark.parametrize("schema", [[], {"type": "array"}, {"type": "object", "properties": 3}])
def test_an_unusable_schema_is_refused(schema: object) -> None:
    with pytest.raises(ValueError):
        arguments_model(schema)


def test_results_become_text_and_long_ones_are_cut() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="hello"),
            types.ImageContent(type="image", data="aGVsbG8h", mimeType="image/png"),
            types.ResourceLink(type="resource_link", name="r", uri="file:///a"),
        ],
        isError=True,
    )
    output = render_result(result, 1000)
    assert output.is_error
    assert output.content == "hello\n[image: image/png, 6 bytes]\n[resource link: file:///a]"
    long = render_result(
        types.CallToolResult(content=[types.TextContent(type="text", text="x" * 50)]), 10
    )
    assert long.content == "x" * 10 + "\n[truncated: 10 of 50 characters shown]"
    structured = types.CallToolResult(content=[], structuredContent={"a": 1})
    assert render_result(structured, 100).content == '{"a": 1}'


def test_server_entries_hash_without_their_mappings() -> None:
    stdio = StdioServer("a", "srv", ("-x",), env={"K": "v"})
    http = HttpServer("b", "https://h/mcp", headers={"A": "1"})
    assert hash(stdio) == hash(StdioServer("a", "srv", ("-x",), env={"K": "other"}))
    assert hash(http) == hash(HttpServer("b", "https://h/mcp", headers={}))
    assert {stdio, http} == {
        StdioServer("a", "srv", ("-x",), env={"K": "v"}),
        HttpServer("b", "https://h/mcp", headers={"A": "1"}),
    }


def test_images_are_attached_only_for_a_model_that_takes_them_and_only_those_it_can() -> None:
    from mcp import types

    png = base64.b64encode(PNG_1X1).decode()

    def image(data: str, mime: str = "image/png") -> types.ImageContent:
        return types.ImageContent(type="image", data=data, mimeType=mime)

    result = types.CallToolResult(
        content=[
            image(png),
            image(png, "image/svg+xml"),
            image("not base64!"),
            image(base64.b64encode(b"\0" * (MAX_IMAGE_BYTES + 1)).decode()),
        ]
    )
    attached = render_result(result, 10_000_000, images=True)
    assert attached.images == (ImageRef.inline("image/png", PNG_1X1),)
    assert attached.content.splitlines() == [
        f"[image: image/png, {len(PNG_1X1)} bytes (attached)]",
        f"[image: image/svg+xml, {len(PNG_1X1)} bytes; not attached: models take PNG, JPEG, "
        "GIF or WebP]",
        "[image: image/png, 8 bytes; not attached: its data is not base64]",
        f"[image: image/png, {MAX_IMAGE_BYTES + 1} bytes; not attached: larger than "
        f"{MAX_IMAGE_BYTES:,} bytes]",
    ]
    described = render_result(result, 10_000_000)  # a model without images
    assert described.images == ()
    assert described.content.splitlines()[0] == f"[image: image/png, {len(PNG_1X1)} bytes]"
    cut = render_result(types.CallToolResult(content=[image(png)]), 5, images=True)
    assert cut.images == attached.images[:1]  # the text is cut, the image stays
