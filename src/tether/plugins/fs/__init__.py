"""The mechanics of the file tools (:mod:`tether.plugins.tool_fs`), one concern a module.

* :mod:`~tether.plugins.fs.workspace` — where a path points, and whether it stays in the workspace;
* :mod:`~tether.plugins.fs.beneath` — every file operation, done in one step beneath that root;
* :mod:`~tether.plugins.fs.access` — reading and writing text: the disk, or an editor's buffers;
* :mod:`~tether.plugins.fs.text` — what counts as text, and line-numbered pages of it;
* :mod:`~tether.plugins.fs.edits` — exact-string edits, applied all or none;
* :mod:`~tether.plugins.fs.snapshots` — what the model last read (stale-read protection);
* :mod:`~tether.plugins.fs.tree` — walking a tree as git sees it (``.gitignore``);
* :mod:`~tether.plugins.fs.search` — ``glob`` and ``grep`` over that walk;
* :mod:`~tether.plugins.fs.ripgrep` — ``grep`` through ripgrep, when installed;
* :mod:`~tether.plugins.fs.tools` — what each tool call does (imported on the first call).
"""

from typing import Literal

from tether.plugins.fs.errors import FileToolError

GrepMode = Literal["files_with_matches", "content", "count"]
"""What ``grep`` answers with: the matching files, the matching lines, or counts."""

__all__ = ["FileToolError", "GrepMode"]
