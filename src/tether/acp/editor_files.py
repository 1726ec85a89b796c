"""The editor's buffers as the file tools' :class:`~tether.front.seams.FileAccess`.

When the client advertises ``fs.readTextFile`` (``fs.writeTextFile``), the
bridge answers :data:`~tether.front.seams.FILE_ACCESS` for its own
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

import stat
from typing import TYPE_CHECKING

import msgspec

from tether.front.seams import (
    PROBE_BYTES,
    FileAccess,
    FileText,
    FileToolError,
    ImageFileError,
    Page,
    Snapshot,
    binary,
    digest,
    image_on_disk,
    is_directory,
    missing,
    on_disk,
    page_text,
)

if TYPE_CHECKING:
    from tether.acp.record import ClientLink
    from tether.front.seams import Resolved


class ClientFeatures(msgspec.Struct, frozen=True):
    """What the client said it serves, in ``initialize``'s ``clientCapabilities``
    (files, terminals, questions for input)."""

    read_text_file: bool = False
    write_text_file: bool = False
    terminal: bool = False
    notices: bool = False
    """``session.notices``: the client shows ``notice`` updates."""
    compaction: bool = False
    """``session.compaction``: the client takes ``compaction_update`` updates."""
    elicitation_form: bool = False
    """It answers ``elicitation/create`` in form mode."""
    elicitation_url: bool = False
    """It answers ``elicitation/create`` in URL mode."""
    echo_prompts: bool = False
    """Its own prompts are shown back to it live (protocol version 2 echoes every
    accepted user message; version 1 clients show their prompts themselves)."""
    cancelled_calls: bool = False
    """A turn that ends cancelled marks each of its calls that did not complete
    ``cancelled`` (protocol version 2's tool call status; version 1 has none)."""

    @classmethod
    def parse(cls, capabilities: object) -> ClientFeatures:
        """Read ``clientCapabilities`` (wire JSON or its wire type); anything malformed is off."""
        if isinstance(capabilities, msgspec.Struct):
            capabilities = msgspec.to_builtins(capabilities)
        if not isinstance(capabilities, dict):
            return cls()
        fs = capabilities.get("fs")
        fs = fs if isinstance(fs, dict) else {}
        session = capabilities.get("session")
        session = session if isinstance(session, dict) else {}
        elicitation = capabilities.get("elicitation")
        elicitation = elicitation if isinstance(elicitation, dict) else {}
        return cls(
            read_text_file=fs.get("readTextFile") is True,
            write_text_file=fs.get("writeTextFile") is True,
            terminal=capabilities.get("terminal") is True,
            # Supplying {} advertises each; omitted or null does not.
            notices=isinstance(session.get("notices"), dict),
            compaction=isinstance(session.get("compaction"), dict),
            elicitation_form=isinstance(elicitation.get("form"), dict),
            elicitation_url=isinstance(elicitation.get("url"), dict),
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

    async def read(self, target: Resolved, offset: int, limit: int) -> tuple[Page, Snapshot]:
        if not self._features.read_text_file:
            return await self._disk.read(target, offset, limit)
        return page_text(await self.read_text(target), offset, limit)

    async def read_text(self, target: Resolved) -> FileText:
        if not self._features.read_text_file:
            return await self._disk.read_text(target)
        shown = target.shown
        _refuse_directory(target)
        media_type = image_on_disk(target)
        if media_type is not None:
            # An editor serves text buffers; an image is read from the disk.
            raise ImageFileError(shown, media_type)
        try:
            text = await self._link.read_text_file(self._session_id, target.real)
        except Exception as exc:
            if on_disk(target) is None:
                raise missing(shown) from None
            raise FileToolError(f"the editor could not read {shown}: {exc}") from None
        if "\0" in text[:PROBE_BYTES]:
            raise binary(shown)
        version = digest(text.encode("utf-8"))
        return FileText(text, version, version)

    async def version(self, target: Resolved) -> str | None:
        if not self._features.read_text_file:
            return await self._disk.version(target)
        try:
            text = await self._link.read_text_file(self._session_id, target.real)
        except Exception:
            return None
        return digest(text.encode("utf-8"))

    async def write_text(self, target: Resolved, text: str) -> Snapshot:
        if not self._features.write_text_file:
            return await self._disk.write_text(target, text)
        _refuse_directory(target)
        try:
            await self._link.write_text_file(self._session_id, target.real, text)
        except Exception as exc:
            raise FileToolError(f"the editor could not write {target.shown}: {exc}") from None
        version = digest(text.encode("utf-8"))
        return Snapshot(version, version)


def _refuse_directory(target: Resolved) -> None:
    """Refuse a directory (one ``stat``: cheap enough for the event loop, unlike a read).

    Raises:
        FileToolError: ``target`` is a directory.
    """
    info = on_disk(target)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise is_directory(target.shown)
