"""Where a session came from: a fork of another session, or a child an agent delegated to.

A header's :class:`Lineage` names the parent session. A fork copied the
parent's first ``seed_length`` events; a child agent's session copied none
and carries a :class:`Delegation`: the parent's tool call that started it,
its depth, its task, whether it runs in the background, and the tools it may
call.

Stored, a lineage is ``{"parent", "seed_length"}``, plus ``"delegation":
{"call", "depth", "task", "background", "tools"}`` for a child. Logs written
before the delegation had a type kept it in the header's labels (``parent``,
``parent_call``, ``depth`` as a numeral, ``task``, ``background: "true"``,
``tools`` as a JSON list in a string, and no lineage); :func:`read_lineage`
reads those into the same record, so every reader sees one shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

import msgspec

from tether.session.errors import HeaderFormatError

__all__ = ["Delegation", "Lineage", "read_lineage"]

_LINEAGE_KEYS = frozenset({"parent", "seed_length"})
_DELEGATED_KEYS = _LINEAGE_KEYS | {"delegation"}
_DELEGATION_KEYS = frozenset({"call", "depth", "task", "background", "tools"})

_OLD_LABELS = ("parent", "parent_call", "depth", "task", "background", "tools")
"""The header labels a child's lineage was kept in before it had a type."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise HeaderFormatError(message)


def _check_keys(what: str, record: object, *allowed: frozenset[str]) -> Mapping[str, object]:
    if not isinstance(record, Mapping):
        raise HeaderFormatError(f"{what} must be an object, got {record!r}")
    if record.keys() not in allowed:
        expected = " or ".join(str(sorted(keys)) for keys in allowed)
        raise HeaderFormatError(
            f"{what} has fields {sorted(map(str, record))}, expected {expected}"
        )
    return record


class Delegation(msgspec.Struct, frozen=True):
    """How a child agent's session was delegated to by its parent.

    Raises:
        HeaderFormatError: a field has the wrong type.
    """

    call: str
    """The parent's tool call that started the child."""
    depth: int
    """1 for a child of a root agent, 2 for a grandchild, …"""
    task: str
    """The task's short description."""
    background: bool = False
    """Started with ``run_in_background``: the call returned at once."""
    tools: tuple[str, ...] | None = None
    """The tools the child may call; ``None``: every registered tool."""

    def __post_init__(self) -> None:
        _require(isinstance(self.call, str), f"delegation call must be a str, got {self.call!r}")
        _require(
            type(self.depth) is int and self.depth >= 1,
            f"delegation depth must be an int >= 1, got {self.depth!r}",
        )
        _require(isinstance(self.task, str), f"delegation task must be a str, got {self.task!r}")
        _require(
            type(self.background) is bool,
            f"delegation background must be a bool, got {self.background!r}",
        )
        tools = self.tools
        if tools is not None:
            _require(
                isinstance(tools, tuple | list) and all(isinstance(t, str) for t in tools),
                f"delegation tools must be a list of str or null, got {tools!r}",
            )
            msgspec.structs.force_setattr(self, "tools", tuple(tools))

    def to_record(self) -> dict[str, object]:
        """Return the delegation as a JSON-ready dict."""
        return {
            "call": self.call,
            "depth": self.depth,
            "task": self.task,
            "background": self.background,
            "tools": None if self.tools is None else list(self.tools),
        }

    @classmethod
    def from_record(cls, record: object) -> Delegation:
        """Rebuild a delegation from a record written by `to_record`.

        Raises:
            HeaderFormatError: the record is malformed.
        """
        record = _check_keys("header lineage delegation", record, _DELEGATION_KEYS)
        tools = record["tools"]
        return cls(
            cast(str, record["call"]),
            cast(int, record["depth"]),
            cast(str, record["task"]),
            cast(bool, record["background"]),
            cast("tuple[str, ...] | None", tools),
        )


class Lineage(msgspec.Struct, frozen=True):
    """Where a session came from: session ``parent``, whose first
    ``seed_length`` events it copied (a fork), or which delegated to it
    (``delegation``; nothing copied).

    Raises:
        HeaderFormatError: a field has the wrong type.
    """

    parent: str
    seed_length: int
    delegation: Delegation | None = None

    def __post_init__(self) -> None:
        _require(
            isinstance(self.parent, str) and self.parent != "",
            f"lineage parent must be a non-empty str, got {self.parent!r}",
        )
        _require(
            type(self.seed_length) is int and self.seed_length >= 0,
            f"lineage seed_length must be an int >= 0, got {self.seed_length!r}",
        )
        _require(
            self.delegation is None or isinstance(self.delegation, Delegation),
            f"lineage delegation must be a Delegation or None, got {self.delegation!r}",
        )

    def to_record(self) -> dict[str, object]:
        """Return the lineage as a JSON-ready dict (``delegation`` only when set)."""
        record: dict[str, object] = {"parent": self.parent, "seed_length": self.seed_length}
        if self.delegation is not None:
            record["delegation"] = self.delegation.to_record()
        return record

    @classmethod
    def from_record(cls, record: object) -> Lineage:
        """Rebuild a lineage from a record written by `to_record`.

        Raises:
            HeaderFormatError: the record is malformed.
        """
        record = _check_keys("header lineage", record, _LINEAGE_KEYS, _DELEGATED_KEYS)
        delegation = record.get("delegation")
        # The constructor checks the field types.
        return cls(
            cast(str, record["parent"]),
            cast(int, record["seed_length"]),
            None if delegation is None else Delegation.from_record(delegation),
        )


def read_lineage(record: object, meta: Mapping[str, str]) -> tuple[Lineage | None, dict[str, str]]:
    """A stored header's lineage and labels, a child's old labels read into its lineage.

    ``record`` is the header's ``lineage`` field, ``meta`` its labels. A header
    with no lineage whose labels name a ``parent`` and a ``parent_call`` is a
    child written before the delegation had a type: its lineage is built from
    them, and they leave the labels.

    Raises:
        HeaderFormatError: the lineage record is malformed.
    """
    if record is not None:
        return Lineage.from_record(record), dict(meta)
    parent, call = meta.get("parent"), meta.get("parent_call")
    if not parent or call is None:
        return None, dict(meta)
    delegation = Delegation(
        call=call,
        depth=_numeral(meta.get("depth")),
        task=meta.get("task", ""),
        background=meta.get("background") == "true",
        tools=_tool_list(meta.get("tools")),
    )
    labels = {key: value for key, value in meta.items() if key not in _OLD_LABELS}
    return Lineage(parent, 0, delegation), labels


def _numeral(label: str | None) -> int:
    try:
        depth = int(label or "1")
    except ValueError:
        return 1
    return max(depth, 1)


def _tool_list(label: str | None) -> tuple[str, ...] | None:
    if label is None:
        return None
    try:
        names = json.loads(label)
    except ValueError:
        return None
    return tuple(str(name) for name in names) if isinstance(names, list) else None
