"""Where tether keeps its data on disk."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(explicit: Path | None = None) -> Path:
    """The data directory: ``explicit``, else ``$TETHER_HOME``, else the XDG data home.

    The XDG default is ``$XDG_DATA_HOME/tether``, falling back to
    ``~/.local/share/tether``. The directory is not created here.
    """
    if explicit is not None:
        return explicit.expanduser()
    home = os.environ.get("TETHER_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "tether"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) if needed; what this creates is mode 0700.

    Session logs hold prompts and tool output, so the directories tether
    creates for them are private whatever the umask. A directory that already
    exists keeps its mode: its owner chose it.
    """
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)
    return path
