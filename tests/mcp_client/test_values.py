"""Server entries, tool names, argument schemas and results: the values, without processes."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

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


def _image(data: bytes | str, mime: str = "image/png") -> types.ImageContent:
    text = data if isinstance(data, str) else base64.b64encode(data).decode()
    return types.ImageContent(type="image", data=text, mimeType=mime)


def test_images_are_attached_only_for_a_model_that_takes_them_and_only_those_it_can() -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"/>'
    large = PNG_1X1 + b"\0" * MAX_IMAGE_BYTES
    result = types.CallToolResult(
        content=[
            _image(PNG_1X1),
            _image(svg, "image/svg+xml"),
            _image("not base64!"),
            _image(large),
        ]
    )
    attached = render_result(result, 10_000_000, images=True)
    assert attached.images == (ImageRef.inline("image/png", PNG_1X1),)
    assert attached.content.splitlines() == [
        f"[image: image/png, {len(PNG_1X1)} bytes (attached)]",
        f"[image: image/svg+xml, {len(svg)} bytes; not attached: its data is not a PNG, JPEG, "
        "GIF or WebP image]",
        "[image: image/png, 7 bytes; not attached: its data is not base64]",
        f"[image: image/png, {len(large)} bytes; not attached: larger than "
        f"{MAX_IMAGE_BYTES:,} bytes]",
    ]
    described = render_result(result, 10_000_000)  # a model without images
    assert described.images == ()
    assert described.content.splitlines()[0] == f"[image: image/png, {len(PNG_1X1)} bytes]"
    cut = render_result(types.CallToolResult(content=[_image(PNG_1X1)]), 5, images=True)
    assert cut.images == attached.images[:1]  # the text is cut, the image stays


JPEG = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffd9")


def test_an_image_is_attached_with_the_type_its_bytes_show_not_the_claimed_one() -> None:
    result = types.CallToolResult(content=[_image(JPEG, "image/png"), _image(PNG_1X1, "image/gif")])
    output = render_result(result, 10_000, images=True)
    assert output.images == (
        ImageRef.inline("image/jpeg", JPEG),
        ImageRef.inline("image/png", PNG_1X1),
    )
    assert output.content.splitlines() == [
        f"[image: image/jpeg, {len(JPEG)} bytes (attached)]",
        f"[image: image/png, {len(PNG_1X1)} bytes (attached)]",
    ]


def test_line_wrapped_base64_is_attached_and_its_size_counts_no_line_breaks() -> None:
    wrapped = base64.encodebytes(PNG_1X1).decode()
    assert "\n" in wrapped.rstrip("\n")
    output = render_result(types.CallToolResult(content=[_image(wrapped)]), 10_000, images=True)
    assert output.images == (ImageRef.inline("image/png", PNG_1X1),)
    assert output.content == f"[image: image/png, {len(PNG_1X1)} bytes (attached)]"
    described = render_result(types.CallToolResult(content=[_image(wrapped)]), 10_000)
    assert described.content == f"[image: image/png, {len(PNG_1X1)} bytes]"


def test_one_result_attaches_at_most_five_images() -> None:
    result = types.CallToolResult(content=[_image(PNG_1X1)] * 7)
    output = render_result(result, 10_000, images=True)
    assert output.images == (ImageRef.inline("image/png", PNG_1X1),) * 5
    assert (
        output.content.splitlines()[5:]
        == [
            f"[image: image/png, {len(PNG_1X1)} bytes; not attached: this result already "
            "attaches 5 images]"
        ]
        * 2
    )


def test_one_result_attaches_at_most_twice_the_image_limit_in_bytes() -> None:
    big = PNG_1X1 + b"\0" * (MAX_IMAGE_BYTES - len(PNG_1X1) - 100)
    result = types.CallToolResult(content=[_image(big), _image(big), _image(big), _image(PNG_1X1)])
    output = render_result(result, 10_000, images=True)
    assert output.images == (
        ImageRef.inline("image/png", big),
        ImageRef.inline("image/png", big),
        ImageRef.inline("image/png", PNG_1X1),  # it still fits
    )
    assert output.content.splitlines()[2] == (
        f"[image: image/png, {len(big)} bytes; not attached: this result's images would "
        f"pass {2 * MAX_IMAGE_BYTES:,} bytes]"
    )
