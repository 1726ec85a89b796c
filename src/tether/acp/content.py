"""An ACP prompt as a tether :class:`~tether.agent.UserMessage`.

========================  ===================================================
ACP content block         becomes
========================  ===================================================
``text``                  text
``resource_link``         a text line ``[@name](uri)`` (the model opens it
                          with its tools)
``resource`` (text)       the text, wrapped as ``<resource uri="…">…</resource>``
``image``                 an image (a ``data:`` URL) when the bridge is
                          configured with ``images: true``; rejected otherwise
``audio``, ``resource``   rejected: nothing in tether can use them
(binary)
========================  ===================================================

A rejected prompt is an invalid-params error; nothing is queued.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from tether.acp.updates import CLIENT_SOURCE
from tether.acp.wire import (
    ImageContentBlock,
    ResourceContentBlock,
    ResourceLinkContentBlock,
    TextContentBlock,
    TextResourceContents,
)
from tether.agent import UserMessage
from tether.content import ImageRef, TextBlock, embedded_resource


class UnsupportedContentError(ValueError):
    """A prompt holds content tether cannot pass to a model."""


def to_message(blocks: Sequence[object], *, images: bool) -> UserMessage:
    """The user message a prompt's ``blocks`` make.

    Raises:
        UnsupportedContentError: a block is of a kind not supported here, or
            the prompt has no content.
    """
    content: list[TextBlock | ImageRef] = []
    for index, block in enumerate(blocks):
        if isinstance(block, TextContentBlock):
            content.append(TextBlock(block.text))
        elif isinstance(block, ResourceLinkContentBlock):
            content.append(TextBlock(f"[@{block.name}]({block.uri})"))
        elif isinstance(block, ResourceContentBlock) and (text := _text_resource(block)):
            content.append(embedded_resource(text.uri, text.text))
        elif isinstance(block, ImageContentBlock) and images:
            url = f"data:{block.mime_type};base64,{block.data}"
            content.append(ImageRef(url, block.mime_type))
        else:
            kind = (
                block.__struct_config__.tag
                if isinstance(block, msgspec.Struct)
                else type(block).__name__
            )
            raise UnsupportedContentError(
                f"prompt block #{index + 1}: {kind!r} content is not supported here"
            )
    if not content:
        raise UnsupportedContentError("the prompt is empty")
    return UserMessage(tuple(content), source=CLIENT_SOURCE)


def _text_resource(block: ResourceContentBlock) -> TextResourceContents | None:
    """The text an embedded resource holds (``None`` for a blob).

    The schema's resource is an untagged union of text and blob contents, which the
    wire type leaves as its JSON object; it is a text resource when it has a ``text``.
    """
    if "text" not in block.resource:
        return None
    try:
        return msgspec.convert(block.resource, TextResourceContents)
    except msgspec.ValidationError:
        return None
