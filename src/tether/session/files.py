"""``file/seen``: what the model last saw of a file, so a resumed session still knows it.

The file tools refuse to change a file the model has not read, or that
changed since it read it (:mod:`tether.plugins.fs.snapshots`). They log each
read, write and edit as one ``FileSeen`` event::

    {"path": "/work/app.py", "version": "…", "digest": "3f2a…"}

``path`` is the file's real path; ``digest`` the digest of the content the
model saw, when it saw all of it (``None`` for a page of a big file, which
is compared by ``version``). A resumed agent rebuilds its record from these
events: a file it read before still counts as read as long as its content
is what was seen. It is part of the core vocabulary; the model never sees it.
"""

from __future__ import annotations

from typing import ClassVar

from tether.session.fields import check_str
from tether.session.vocabulary import EventStruct

__all__ = ["FILE_SEEN_TYPE", "FileSeen"]

_TYPE = "file/seen"
FILE_SEEN_TYPE = _TYPE


class FileSeen(EventStruct, frozen=True, omit_defaults=True):
    """The model saw ``path`` as ``version`` (and, all of it, as ``digest``)."""

    type: ClassVar[str] = _TYPE

    path: str
    version: str
    digest: str | None = None

    def __post_init__(self) -> None:
        check_str(_TYPE, "path", self.path)
        check_str(_TYPE, "version", self.version)
        if self.digest is not None:
            check_str(_TYPE, "digest", self.digest)
