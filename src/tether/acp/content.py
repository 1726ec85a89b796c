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

from acp.schema import (
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from tether.acp.updates import CLIENT_SOURCE
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
        elif isinstance(block, ResourceContentBlock):
            content.append(TextBlock(f"[@{block.name}]({block.uri})"))
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            block.resource, TextResourceContents
        ):
            content.append(embedded_resource(block.resource.uri, block.resource.text))
        elif isinstance(block, ImageContentBlock) and images:
            url = f"data:{block.mime_type};base64,{block.data}"
            content.append(ImageRef(url, block.mime_type))
        else:
            kind = getattr(block, "type", type(block).__name__)
            raise UnsupportedContentError(
                f"prompt block #{index + 1}: {kind!r} content is not supported here"
            )
    if not content:
        raise UnsupportedContentError("the prompt is empty")
    return UserMessage(tuple(content), source=CLIENT_SOURCE)
