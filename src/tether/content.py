"""Model-facing messages: the conversation as an LLM adapter sees it.

These are plain values. Every class is frozen and slotted and checks its fields
on construction, raising `TypeError` for a field of the wrong type, so a message
that exists is well-formed. Content blocks are msgspec ``Struct`` types tagged by
``type``, so the session log stores and decodes them in their one definition
here (``{"type": "text", "text": ...}`` and so on). Sequences of content blocks are stored
as tuples whatever sequence the caller passed, so a message never shares mutable
state with its creator. Messages can be weakly referenced, so an adapter can
remember how it encoded one for as long as the message lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NoReturn

import msgspec
from msgspec.structs import force_setattr

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "AssistantBlock",
    "AssistantMessage",
    "ImageRef",
    "Message",
    "ReasoningBlock",
    "RedactedReasoningBlock",
    "SystemMessage",
    "TextBlock",
    "ToolCallBlock",
    "ToolMessage",
    "ToolSpec",
    "UserBlock",
    "UserRoleMessage",
    "embedded_resource",
    "image_type",
]


_Expected = type | tuple[type, ...]


def _reject(value: object, **expected: _Expected) -> NoReturn:
    """Raise the `TypeError` for the first field of ``value`` that does not
    have its expected type."""
    owner = type(value).__name__
    for name, kinds in expected.items():
        field_value = getattr(value, name)
        if not isinstance(field_value, kinds):
            options = kinds if isinstance(kinds, tuple) else (kinds,)
            names = " or ".join("None" if kind is type(None) else kind.__name__ for kind in options)
            raise TypeError(f"{owner}.{name} must be {names}, got {field_value!r}")
    raise AssertionError(f"{owner}: no field is wrong")


# Each __post_init__ tests all fields in one expression and only looks for the
# culprit when that fails: messages are built often, and a failure is rare.


class TextBlock(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    """Plain text."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            _reject(self, text=str)


IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types every provider takes inline."""

MAX_IMAGE_BYTES = 3 * 1024 * 1024 + 768 * 1024
"""3.75 MiB: the largest image whose base64 form fits 5 MiB (5,242,880 bytes),
Anthropic's limit per image (OpenAI and Gemini accept more)."""

_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(head: bytes) -> str | None:
    """The media type (one of :data:`IMAGE_TYPES`) of the image whose bytes start
    with ``head``, told by its signature; ``None`` if it is not one. Twelve bytes
    are enough to tell."""
    for signature, media_type in _IMAGE_SIGNATURES:
        if head.startswith(signature):
            return media_type
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def embedded_resource(uri: str, text: str) -> TextBlock:
    """The text block a prompt carries for a resource given with it (an editor's
    embedded resource, a chat's ``@path``): its text, wrapped with its URI."""
    return TextBlock(f'<resource uri="{uri}">\n{text}\n</resource>')


class ImageRef(msgspec.Struct, frozen=True, tag_field="type", tag="image"):
    """An image the model should look at, by URL (``https:`` or ``data:``)."""

    url: str
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.url, str) and isinstance(self.mime_type, str | None)):
            _reject(self, url=str, mime_type=(str, type(None)))

    @classmethod
    def inline(cls, mime_type: str, data: bytes) -> ImageRef:
        """The image whose bytes are ``data``, carried in a base64 ``data:`` URL."""
        import base64

        encoded = base64.b64encode(data).decode("ascii")
        return cls(f"data:{mime_type};base64,{encoded}", mime_type)


class ReasoningBlock(msgspec.Struct, frozen=True, tag_field="type", tag="reasoning"):
    """Reasoning the model emitted before answering.

    ``signature`` is the provider's opaque token for replaying the reasoning in a
    later request; providers that issue one reject a replay without it.
    """

    text: str
    signature: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.text, str) and isinstance(self.signature, str | None)):
            _reject(self, text=str, signature=(str, type(None)))


class RedactedReasoningBlock(
    msgspec.Struct, frozen=True, tag_field="type", tag="redacted_reasoning"
):
    """Reasoning the provider sent encrypted (Anthropic's ``redacted_thinking``).

    ``data`` is the provider's opaque form of it; it has no readable text. The
    provider requires it back unchanged, in its place among the answer's
    blocks, in the requests that continue the answer (a tool loop).
    """

    data: str

    def __post_init__(self) -> None:
        if not isinstance(self.data, str):
            _reject(self, data=str)


class ToolCallBlock(msgspec.Struct, frozen=True, tag_field="type", tag="tool_call"):
    """A tool call the model requested.

    ``arguments`` is the decoded JSON object of the call. The block does not copy
    it: treat it as read-only. Blocks read back from a session log carry deeply
    immutable arguments.
    """

    id: str
    name: str
    arguments: Mapping[str, object]

    def __post_init__(self) -> None:
        if not (
            isinstance(self.id, str)
            and isinstance(self.name, str)
            and isinstance(self.arguments, dict | MappingProxyType | Mapping)
        ):
            _reject(self, id=str, name=str, arguments=Mapping)

    def __hash__(self) -> int:
        # Mappings are unhashable; `id` and `name` keep the hash consistent
        # with equality.
        return hash((self.id, self.name))


UserBlock = TextBlock | ImageRef
"""Content a user message may carry."""

AssistantBlock = TextBlock | ReasoningBlock | RedactedReasoningBlock | ToolCallBlock
"""Content an assistant message may carry."""

_USER_BLOCKS = (TextBlock, ImageRef)
_ASSISTANT_BLOCKS = (TextBlock, ReasoningBlock, RedactedReasoningBlock, ToolCallBlock)


def _blocks(
    owner: str, content: object, allowed: tuple[type, ...], field: str = "content"
) -> tuple[object, ...]:
    if type(content) is tuple:
        blocks: tuple[object, ...] = content
    # A str is iterable too; taking it as a sequence of blocks would only fail
    # later with a confusing message about its characters.
    elif isinstance(content, str | bytes) or not isinstance(content, Iterable):
        raise TypeError(f"{owner}.{field} must be a sequence of blocks, got {content!r}")
    else:
        blocks = tuple(content)
    for block in blocks:
        if not isinstance(block, allowed):
            names = " or ".join(kind.__name__ for kind in allowed)
            raise TypeError(f"{owner}.{field} entries must be {names}, got {block!r}")
    return blocks


class SystemMessage(msgspec.Struct, frozen=True, weakref=True):
    """Instructions that frame the conversation."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            _reject(self, text=str)


class UserRoleMessage(msgspec.Struct, frozen=True, weakref=True):
    """What the user (or a program speaking for them) said."""

    content: tuple[UserBlock, ...]

    def __post_init__(self) -> None:
        force_setattr(self, "content", _blocks("UserRoleMessage", self.content, _USER_BLOCKS))


class AssistantMessage(msgspec.Struct, frozen=True, weakref=True):
    """What the model answered.

    ``interrupted`` marks an answer cut short (a cancel or a crash): its content
    is what had streamed by then, and its tool calls may be incomplete.
    """

    content: tuple[AssistantBlock, ...]
    interrupted: bool = False

    def __post_init__(self) -> None:
        force_setattr(self, "content", _blocks("AssistantMessage", self.content, _ASSISTANT_BLOCKS))
        if not isinstance(self.interrupted, bool):
            _reject(self, interrupted=bool)

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        """The tool calls among the content, in order."""
        return tuple(block for block in self.content if isinstance(block, ToolCallBlock))

    @property
    def text(self) -> str:
        """The answer's text blocks, joined (reasoning and tool calls left out)."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))


class ToolMessage(msgspec.Struct, frozen=True, weakref=True):
    """The result of one tool call, answering the call with id ``call_id``.

    ``content`` is its text; ``images`` are images the result carries beside
    it (a ``read`` of an image file), for a model that accepts them.
    """

    call_id: str
    name: str
    content: str
    is_error: bool
    images: tuple[ImageRef, ...] = ()

    def __post_init__(self) -> None:
        if not (
            isinstance(self.call_id, str)
            and isinstance(self.name, str)
            and isinstance(self.content, str)
            and isinstance(self.is_error, bool)
        ):
            _reject(self, call_id=str, name=str, content=str, is_error=bool)
        if self.images or type(self.images) is not tuple:
            force_setattr(
                self, "images", _blocks("ToolMessage", self.images, (ImageRef,), "images")
            )


Message = SystemMessage | UserRoleMessage | AssistantMessage | ToolMessage
"""Any message of a conversation."""


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool as the model sees it: a name, what it does, and its arguments' JSON Schema.

    What a model request carries (:class:`tether.llm.request.ModelRequest`)
    and what a tool says of itself (:meth:`tether.tools.definition.Tool.spec`).
    ``parameters`` is not copied: treat it as read-only.

    Raises:
        ValueError: ``name`` is empty.
        TypeError: ``parameters`` is not a mapping.
    """

    name: str
    description: str
    parameters: Mapping[str, object]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ToolSpec.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.parameters, Mapping):
            raise TypeError(f"ToolSpec.parameters must be a mapping, got {self.parameters!r}")

    def __hash__(self) -> int:
        # Mappings are unhashable; `name` and `description` keep the hash
        # consistent with equality.
        return hash((self.name, self.description))
