"""Image files: told by their signature, read whole for a model that accepts images.

An image is recognized by its first bytes (PNG, JPEG, GIF, WebP), never by
its name. ``read`` returns it as image content when the model that made the
call accepts images (:meth:`~tether.llm.catalog.ModelCatalog.accepts_images`),
and refuses it with the reason otherwise.

Images are sent to the provider as they are, base64-encoded, so the cap is
on their size: :data:`MAX_IMAGE_BYTES` by default, whose base64 form is
exactly Anthropic's 5 MiB per-image limit (OpenAI and Gemini accept more).
Nothing is resized or re-encoded.
"""

from __future__ import annotations

from tether.content import MAX_IMAGE_BYTES, image_type
from tether.plugins.fs.errors import FileToolError

__all__ = ["MAX_IMAGE_BYTES", "ImageFileError", "image_type"]


class ImageFileError(FileToolError):
    """The file is an image, not text: ``media_type`` says which kind."""

    def __init__(self, shown: str, media_type: str) -> None:
        super().__init__(f"{shown} is an image ({media_type}), not a text file")
        self.media_type = media_type
