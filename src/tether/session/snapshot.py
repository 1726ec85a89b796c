"""``workspace/snapshot``: the workspace's files at one seq of the session.

A snapshot is taken at the start of every turn, before each tool call that
can write, after it, and after tether itself rewrote the workspace (a rewind,
a fork). Its ``tree`` names the files' content in the workspace's private
object store (:mod:`tether.rewind`); the event binds that content to the
seq it is stored at::

    {"moment": "call", "turn": 2, "tree": "4b82…", "root": "/src/app",
     "call": "call-7", "running": ["bash-1"], "unstored": ["data/big.bin"],
     "outside": ["/etc/hosts"]}

``moment`` says when it was taken:

* ``turn`` — a turn starts (before its first model request);
* ``call`` — right before the tool call ``call`` runs;
* ``called`` — right after that call returned;
* ``rewound`` — tether restored the snapshot at seq ``restored``;
* ``forked`` — this session was forked from another: the workspace as it
  was then, left as the parent's agent had it.

``running`` lists the session's background tasks still running at that
moment (what changes until the next snapshot may be theirs). ``unstored``
lists workspace files the snapshot could not hold (larger than the store's
cap, or a nested repository), ``outside`` the files outside the workspace
that the call names: neither can be restored. Not model-visible. It is part
of the core vocabulary: a log holding it loads without the plugin that wrote
it, and a log without any loads as before.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import msgspec

from tether.session.fields import as_tuple, bad_field, check_choice, check_id
from tether.session.payload import EventStruct

__all__ = ["SnapshotMoment", "WorkspaceSnapshot"]

SnapshotMoment = Literal["turn", "call", "called", "rewound", "forked"]
_MOMENTS: tuple[str, ...] = get_args(SnapshotMoment)
_TYPE = "workspace/snapshot"


class WorkspaceSnapshot(EventStruct, frozen=True, omit_defaults=True):
    """The workspace's files at this seq (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    moment: SnapshotMoment
    turn: int
    tree: str
    root: str
    call: str | None = None
    restored: int | None = None
    running: tuple[str, ...] = ()
    unstored: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_choice(_TYPE, "moment", self.moment, _MOMENTS)
        if type(self.turn) is not int or self.turn < 0:
            raise bad_field(_TYPE, "turn", "an int >= 0", self.turn)
        check_id(_TYPE, "tree", self.tree)
        check_id(_TYPE, "root", self.root)
        if self.call is not None:
            check_id(_TYPE, "call", self.call)
        if self.restored is not None and (type(self.restored) is not int or self.restored < 0):
            raise bad_field(_TYPE, "restored", "an int >= 0", self.restored)
        for name in ("running", "unstored", "outside"):
            items = as_tuple(_TYPE, name, getattr(self, name))
            if not all(isinstance(item, str) and item for item in items):
                raise bad_field(_TYPE, name, "a list of non-empty str", items)
            msgspec.structs.force_setattr(self, name, items)

    @property
    def by_tether(self) -> bool:
        """Whether tether itself rewrote the workspace right before this snapshot."""
        return self.moment in ("rewound", "forked")
