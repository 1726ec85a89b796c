"""``@path`` in a chat prompt: the file (or a directory's listing) goes with it.

A word of the prompt that starts with ``@`` and names a file or a directory
(relative to the chat's working directory, ``~`` expanded) attaches it: the
file's text, or the directory's entries one per line (directories ending in
``/``), as an embedded resource (:func:`tether.content.embedded_resource`,
the form an editor's embedded resources take too). The prompt's text stays as
typed. A word that names nothing is left as it is (``@someone`` in prose); a
file that is too big or not text is not attached, and the chat says why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from tether.content import TextBlock, embedded_resource

MAX_ATTACHED_BYTES = 256 * 1024
"""The most bytes of one file a mention attaches (the model can read more with its tools)."""

MAX_LISTED_ENTRIES = 500
"""The most entries of one directory a mention lists."""

_MENTION = re.compile(r"(?<!\S)@(\S+)")
_TRAILING = ",.;:!?)]}'\""


class Attached(NamedTuple):
    """What the mentions of one prompt attach, and what the person is told."""

    blocks: tuple[TextBlock, ...]
    notes: tuple[str, ...]


def attach_mentions(text: str, cwd: Path) -> Attached:
    """The resources the ``@path`` words of ``text`` name, each once, in order."""
    blocks: list[TextBlock] = []
    notes: list[str] = []
    seen: set[Path] = set()
    for match in _MENTION.finditer(text):
        path = _named(match.group(1), cwd)
        if path is None or path in seen:
            continue
        seen.add(path)
        block, note = _attach(path, match.group(1).rstrip(_TRAILING))
        if block is not None:
            blocks.append(block)
        notes.append(note)
    return Attached(tuple(blocks), tuple(notes))


def _named(word: str, cwd: Path) -> Path | None:
    """The existing path ``word`` names (trailing punctuation tried without), or ``None``."""
    for candidate in (word, word.rstrip(_TRAILING)):
        if not candidate:
            continue
        path = Path(os.path.expanduser(candidate))
        path = path if path.is_absolute() else cwd / path
        if path.exists():
            return path.resolve()
    return None


def _attach(path: Path, shown: str) -> tuple[TextBlock | None, str]:
    """The block for ``path`` and the line telling the person, or why it is not attached."""
    uri = path.as_uri()
    if path.is_dir():
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            return None, f"@{shown} not attached: {exc.strerror}"
        listed = [n + ("/" if (path / n).is_dir() else "") for n in names[:MAX_LISTED_ENTRIES]]
        more = len(names) - len(listed)
        listing = "\n".join(listed) + (f"\n… and {more} more" if more else "")
        counted = "1 entry" if len(names) == 1 else f"{len(names)} entries"
        return embedded_resource(uri, listing), f"attached @{shown} ({counted})"
    try:
        size = path.stat().st_size
        if size > MAX_ATTACHED_BYTES:
            kib = MAX_ATTACHED_BYTES // 1024
            return None, f"@{shown} not attached: {size:,} bytes, more than {kib} KiB"
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None, f"@{shown} not attached: not UTF-8 text"
    except OSError as exc:
        return None, f"@{shown} not attached: {exc.strerror}"
    lines = text.count("\n") + (not text.endswith("\n") and bool(text))
    counted = "1 line" if lines == 1 else f"{lines} lines"
    return embedded_resource(uri, text), f"attached @{shown} ({counted})"
