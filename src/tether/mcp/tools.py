"""An MCP server's tools as tether tools: ``mcp__<server>__<tool>``.

Each tool the server lists becomes a :class:`~tether.tools.Tool` whose
argument model carries the server's own JSON Schema (what the model is
shown) and validates a call's arguments against it with ``jsonschema``
before anything is sent, so a call goes through tether's pipeline like any
other (permission mode, cancel, error results).

Names: provider APIs accept ``^[a-zA-Z][a-zA-Z0-9_-]{0,63}$``. Characters
outside that set become ``_``; a name that would be longer than 64 is cut and
ends with 8 hex digits of a hash of the full name, so two tools never share
a name by truncation.

Results: text content is kept as it is; an image (PNG, JPEG, GIF or WebP,
told by its bytes, up to :data:`~tether.content.MAX_IMAGE_BYTES`) is attached
for a model that accepts images, as ``read`` attaches one, and described
otherwise, as are the images past :data:`MAX_RESULT_IMAGES` or
:data:`MAX_RESULT_IMAGE_BYTES` in one result; audio
and binary resources are described; structured content is shown as JSON
when there is no other content. A result longer than ``max_result_chars``
is cut with a note (the images stay).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.content import MAX_IMAGE_BYTES, ImageRef, image_type
from tether.mcp.errors import McpUnavailableError
from tether.tools.definition import Tool, ToolExec, ToolOutput

if TYPE_CHECKING:
    import mcp_types as types

    from tether.mcp.connection import McpConnection

log = logging.getLogger(__name__)

PREFIX = "mcp"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64

MAX_RESULT_IMAGES = 5
"""The most images one result attaches: each stays in every later request."""

MAX_RESULT_IMAGE_BYTES = 2 * MAX_IMAGE_BYTES
"""The most decoded image bytes one result attaches, for the same reason."""


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, made acceptable to every provider (see the module docs)."""
    full = f"{PREFIX}__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(full) <= _MAX_NAME:
        return full
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{full[: _MAX_NAME - 9]}_{digest}"


def build_tools(
    connection: McpConnection,
    listed: list[types.Tool],
    max_result_chars: int,
    accepts_images: Callable[[str | None], bool] = lambda model: False,
) -> tuple[list[Tool[Any]], list[str]]:
    """The tools of ``connection`` (one per listed tool), and a problem per tool left out
    (an unusable schema, a name that collides with another of the server's tools).

    ``accepts_images(model)`` says whether the model that made a call (its
    :attr:`ToolExec.model`) gets the images of the result."""
    tools: list[Tool[Any]] = []
    problems: list[str] = []
    names: set[str] = set()
    for item in listed:
        name = tool_name(connection.name, item.name)
        if name in names:
            problems.append(f"tool {item.name!r} was left out: its name collides as {name!r}")
            continue
        try:
            args = arguments_model(item.input_schema)
        except ValueError as exc:
            problems.append(f"tool {item.name!r} was left out: its input schema is unusable: {exc}")
            continue
        names.add(name)
        hints = item.annotations
        tools.append(
            Tool(
                name=name,
                description=item.description
                or item.title
                or f"{item.name} (MCP server {connection.name})",
                args=args,
                execute=_caller(connection, item.name, max_result_chars, accepts_images),
                concurrency_safe=bool(hints is not None and hints.read_only_hint),
                # A read-only tool changes nothing; an idempotent one, nothing more the
                # second time: either may run again after a crash cut a call off.
                idempotent=bool(
                    hints is not None and (hints.read_only_hint or hints.idempotent_hint)
                ),
            )
        )
    return tools, problems


def _caller(
    connection: McpConnection,
    remote: str,
    limit: int,
    accepts_images: Callable[[str | None], bool],
) -> Any:
    async def execute(args: Any, exec: ToolExec) -> ToolOutput:
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        try:
            result = await connection.call(
                remote, dict(args.root), exec.signal, call_id=exec.call_id
            )
        except McpUnavailableError as exc:
            return ToolOutput(str(exc), is_error=True)
        except MCPError as exc:
            return ToolOutput(f"MCP server {connection.name!r}: {exc.error.message}", is_error=True)
        except ValidationError as exc:
            return ToolOutput(
                f"MCP server {connection.name!r} answered {remote} with a malformed result "
                f"({exc.error_count()} problem(s); first: {exc.errors()[0]['msg']})",
                is_error=True,
            )
        except RuntimeError as exc:
            # The SDK's checks of a result: structured content against the tool's
            # output schema, or a result kind tether does not take.
            return ToolOutput(f"MCP server {connection.name!r}: {exc}", is_error=True)
        return render_result(result, limit, images=accepts_images(exec.model))

    return execute


def arguments_model(schema: object) -> type[Any]:
    """A pydantic model (a root of JSON object arguments) that shows ``schema`` to the
    model and validates arguments against it.

    Raises:
        ValueError: ``schema`` is not a valid JSON Schema of an object.
    """
    import jsonschema  # type: ignore[import-untyped]
    from pydantic import RootModel, model_validator
    from pydantic_core import PydanticCustomError

    if not isinstance(schema, dict):
        raise ValueError("it is not a JSON object")
    shown: dict[str, Any] = json.loads(json.dumps(schema))
    if shown.setdefault("type", "object") != "object":
        raise ValueError(f"it describes {shown['type']!r}, not an object")
    try:
        validator_class = jsonschema.validators.validator_for(shown)
        validator_class.check_schema(shown)
    except jsonschema.SchemaError as exc:
        raise ValueError(exc.message) from None
    validator = validator_class(shown)

    class McpArguments(RootModel[dict[str, Any]]):
        @model_validator(mode="after")
        def _check(self) -> McpArguments:
            errors = sorted(validator.iter_errors(self.root), key=lambda e: list(e.absolute_path))
            if errors:
                detail = "; ".join(_located(error) for error in errors[:5])
                raise PydanticCustomError("mcp_schema", "{detail}", {"detail": detail})
            return self

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            copied: dict[str, Any] = json.loads(json.dumps(shown))
            return copied

    return McpArguments


def _located(error: Any) -> str:
    path = ".".join(str(part) for part in error.absolute_path)
    return f"{path}: {error.message}" if path else str(error.message)


def render_result(result: types.CallToolResult, limit: int, *, images: bool = False) -> ToolOutput:
    """``result`` as the text the model reads, cut at ``limit`` characters; with
    ``images``, the images a model can take attached (see the module docs)."""
    import mcp_types as types

    parts: list[str] = []
    attached: list[ImageRef] = []
    attached_bytes = 0
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            data = block.data.translate(_ASCII_WHITESPACE)
            size = _decoded_size(data)
            if not images:
                parts.append(f"[image: {block.mime_type}, {size} bytes]")
                continue
            image, note = _image(data, len(attached), attached_bytes)
            if image is None:
                parts.append(f"[image: {block.mime_type}, {size} bytes; not attached: {note}]")
                continue
            attached.append(image)
            attached_bytes += size
            parts.append(f"[image: {image.mime_type}, {size} bytes (attached)]")
        elif isinstance(block, types.AudioContent):
            data = block.data.translate(_ASCII_WHITESPACE)
            parts.append(f"[audio: {block.mime_type}, {_decoded_size(data)} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri}: {resource.mime_type or 'binary'}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > limit:
        text = f"{text[:limit]}\n[truncated: {limit} of {len(text)} characters shown]"
    return ToolOutput(text, is_error=bool(result.is_error), images=tuple(attached))


# Base64 may be wrapped in lines (RFC 2045); the decoder's strict mode refuses
# any whitespace, so it goes first.
_ASCII_WHITESPACE = str.maketrans("", "", " \t\n\r\f\v")


def _decoded_size(data: str) -> int:
    """How many bytes the base64 text ``data`` (without whitespace) holds."""
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


def _image(data: str, count: int, total: int) -> tuple[ImageRef | None, str]:
    """The image an MCP result carries (base64 ``data`` without whitespace) as image
    content, or ``None`` and why it is not attached, given the ``count`` images of
    ``total`` decoded bytes the result already attaches.

    The type attached is the one the bytes show (:func:`~tether.content.image_type`),
    whatever the server claims: a provider refuses an image whose declared type does
    not match its bytes, and the refused image would stay in every later request."""
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None, "its data is not base64"
    media_type = image_type(decoded[:16])
    if media_type is None:
        return None, "its data is not a PNG, JPEG, GIF or WebP image"
    if len(decoded) > MAX_IMAGE_BYTES:
        return None, f"larger than {MAX_IMAGE_BYTES:,} bytes"
    if count >= MAX_RESULT_IMAGES:
        return None, f"this result already attaches {MAX_RESULT_IMAGES} images"
    if total + len(decoded) > MAX_RESULT_IMAGE_BYTES:
        return None, f"this result's images would pass {MAX_RESULT_IMAGE_BYTES:,} bytes"
    # ``data`` is the image's base64 already (checked above): not encoded again.
    return ImageRef(f"data:{media_type};base64,{data}", media_type), ""


RESOURCE_TOOL = "read_resource"
"""The tool each server declaring the ``resources`` capability gets:
``mcp__<server>__read_resource``."""


def resource_tool(connection: McpConnection, max_result_chars: int) -> Tool[Any]:
    """``mcp__<server>__read_resource``: reads one of the server's resources by URI;
    text is kept (cut at ``max_result_chars``), binary contents are described."""
    from pydantic import BaseModel, Field

    class ResourceArguments(BaseModel):
        uri: str = Field(description="The URI of the resource, as the server names it.")

    server = connection.name

    async def execute(args: ResourceArguments, exec: ToolExec) -> ToolOutput:
        from mcp.shared.exceptions import MCPError

        try:
            result = await connection.read_resource(args.uri, exec.signal)
        except McpUnavailableError as exc:
            return ToolOutput(str(exc), is_error=True)
        except MCPError as exc:
            return ToolOutput(
                f"MCP server {server!r} could not read {args.uri}: {exc.error.message}",
                is_error=True,
            )
        return ToolOutput(render_resource(result, max_result_chars))

    return Tool(
        name=tool_name(server, RESOURCE_TOOL),
        description=f"Read a resource of the MCP server {server!r} by its URI.",
        args=ResourceArguments,
        execute=execute,
        concurrency_safe=True,
        idempotent=True,
    )


def render_resource(result: types.ReadResourceResult, limit: int) -> str:
    """The contents of a ``resources/read`` answer as text, cut at ``limit`` characters:
    each text content as it is, each binary one described."""
    import mcp_types as types

    parts: list[str] = []
    for item in result.contents:
        if isinstance(item, types.TextResourceContents):
            parts.append(item.text)
        else:
            data = item.blob.translate(_ASCII_WHITESPACE)
            parts.append(
                f"[resource {item.uri}: {item.mime_type or 'binary'}, {_decoded_size(data)} bytes]"
            )
    text = "\n".join(parts)
    if len(text) > limit:
        text = f"{text[:limit]}\n[truncated: {limit} of {len(text)} characters shown]"
    return text
