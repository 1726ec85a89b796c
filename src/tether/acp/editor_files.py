"""The editor's buffers as the file tools' :class:`~tether.plugins.fs.access.FileAccess`.

When the client advertises ``fs.readTextFile`` (``fs.writeTextFile``), the
bridge answers :data:`~tether.plugins.fs.access.FILE_ACCESS` for its own
sessions with an :class:`EditorFiles`: reads (writes) go through
``fs/read_text_file`` (``fs/write_text_file``), so the model sees unsaved
buffers and its edits land in the editor, where the person can review and
undo them. What the client does not advertise goes to the disk.

A buffer's version is a digest of its text (an editor has no inode or
modification time to offer), so the stale-read protection compares content.
A request the client fails is an error result naming the file and the
client's reason; nothing is written when it fails.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import msgspec

from tether.plugins.fs.access import FileAccess, FileText, page_text
from tether.plugins.fs.errors import FileToolError
from tether.plugins.fs.images import ImageFileError, image_on_disk
from tether.plugins.fs.snapshots import Snapshot, digest
from tether.plugins.fs.text import PROBE_BYTES, Page

if TYPE_CHECKING:
    from tether.acp.record import ClientLink


class ClientFeatures(msgspec.Struct, frozen=True):
    """What the client said it serves, in ``initialize``'s ``clientCapabilities``."""

    read_text_file: bool = False
    write_text_file: bool = False
    terminal: bool = False

    @classmethod
    def parse(cls, capabilities: object) -> ClientFeatures:
        """Read ``clientCapabilities`` (wire JSON or the SDK's model); anything malformed is off."""
        if hasattr(capabilities, "model_dump"):
            capabilities = capabilities.model_dump(by_alias=True)
        if not isinstance(capabilities, dict):
            return cls()
        fs = capabilities.get("fs")
        fs = fs if isinstance(fs, dict) else {}
        return cls(
            read_text_file=fs.get("readTextFile") is True,
            write_text_file=fs.get("writeTextFile") is True,
            terminal=capabilities.get("terminal") is True,
        )


class EditorFiles:
    """Files of one session, through its client where the client serves them."""

    where = "editor"

    def __init__(
        self, link: ClientLink, session_id: str, features: ClientFeatures, disk: FileAccess
    ) -> None:
        self._link = link
        self._session_id = session_id
        self._features = features
        self._disk = disk

    async def read(self, path: str, shown: str, offset: int, limit: int) -> tuple[Page, Snapshot]:
        if not self._features.read_text_file:
            return await self._disk.read(path, shown, offset, limit)
        return page_text(await self.read_text(path, shown), offset, limit)

    async def read_text(self, path: str, shown: str) -> FileText:
        if not self._features.read_text_file:
            return await self._disk.read_text(path, shown)
        if _is_dir(path):
            raise FileToolError(f"{shown} is a directory, not a file")
        media_type = image_on_disk(path)
        if media_type is not None:
            # An editor serves text buffers; an image is read from the disk.
            raise ImageFileError(shown, media_type)
        try:
            text = await self._link.read_text_file(self._session_id, path)
        except Exception as exc:
            if not _exists(path):
                raise FileToolError(f"{shown} does not exist") from None
            raise FileToolError(f"the editor could not read {shown}: {exc}") from None
        if "\0" in text[:PROBE_BYTES]:
            raise FileToolError(f"{shown} is a binary file (it holds NUL bytes), not a text file")
        return FileText(text, digest(text.encode("utf-8")))

    async def version(self, path: str) -> str | None:
        if not self._features.read_text_file:
            return await self._disk.version(path)
        try:
            text = await self._link.read_text_file(self._session_id, path)
        except Exception:
            return None
        return digest(text.encode("utf-8"))

    async def write_text(self, path: str, shown: str, text: str) -> Snapshot:
        if not self._features.write_text_file:
            return await self._disk.write_text(path, shown, text)
        if _is_dir(path):
            raise FileToolError(f"{shown} is a directory, not a file")
        try:
            await self._link.write_text_file(self._session_id, path, text)
        except Exception as exc:
            raise FileToolError(f"the editor could not write {shown}: {exc}") from None
        version = digest(text.encode("utf-8"))
        return Snapshot(version, version)


def _is_dir(path: str) -> bool:
    # One stat: cheap enough for the event loop, unlike a read.
    return os.path.isdir(path)


def _exists(path: str) -> bool:
    return os.path.exists(path)
