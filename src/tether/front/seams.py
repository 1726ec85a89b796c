"""The seams a front end answers, besides its sessions' events: one place to import them.

A front end serves the agents it governs where a tool would otherwise go to
the machine, and imports no plugin to do so: the keys and payload types are
defined next to the tools that emit them (a plugin may not import the front
layer above it) and gathered here.

* ``permission/request`` — :data:`tether.front.asking.PERMISSION_REQUEST`: may
  this call run? (asked through the question asker);
* ``fs/access`` — :data:`FILE_ACCESS`: the files the file tools read and
  write for an agent (the editor's buffers instead of the disk), a
  :class:`FileAccess` and its vocabulary;
* ``shell/client-terminal`` — :data:`CLIENT_TERMINAL`: where a foreground
  ``bash`` command of an agent runs (the client's terminals), a
  :class:`Terminals` answering with a :class:`TerminalResult`.
"""

from __future__ import annotations

from tether.plugins.fs.access import (
    FILE_ACCESS,
    FileAccess,
    FileText,
    image_on_disk,
    on_disk,
    page_text,
)
from tether.plugins.fs.errors import FileToolError, binary, is_directory, missing
from tether.plugins.fs.images import ImageFileError
from tether.plugins.fs.snapshots import Snapshot, digest
from tether.plugins.fs.text import PROBE_BYTES, Page
from tether.plugins.fs.workspace import Resolved
from tether.plugins.terminal import CLIENT_TERMINAL, TERMINAL_PGID, TerminalResult, Terminals

__all__ = [
    "CLIENT_TERMINAL",
    "FILE_ACCESS",
    "PROBE_BYTES",
    "TERMINAL_PGID",
    "FileAccess",
    "FileText",
    "FileToolError",
    "ImageFileError",
    "Page",
    "Resolved",
    "Snapshot",
    "TerminalResult",
    "Terminals",
    "binary",
    "digest",
    "image_on_disk",
    "is_directory",
    "missing",
    "on_disk",
    "page_text",
]
