"""What the command line knows about where it writes: a terminal, and whether it may colour.

Colours and Markdown are for a person at a terminal: a stream that is not a
terminal (a pipe, a file) gets plain text, and so does any stream when
``NO_COLOR`` is set (to anything non-empty, as https://no-color.org says) or
``TERM`` is ``dumb``.
"""

from __future__ import annotations

import os
from typing import TextIO


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or detached stream is not)."""
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def colours_wanted(stream: TextIO) -> bool:
    """Whether text written to ``stream`` may carry colours and styles."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)
