"""How a tool's calls are shown to a person: declared once by the tool, read by every front end.

A tool says what its calls are (:attr:`ToolShown.kind`, ACP's vocabulary),
which of its arguments name the files they touch and the line to start at,
which arguments a one-line summary leaves out because they are shown as a
change instead, how its title reads, and how the change a call makes is
found in its arguments. The ACP bridge, the web app and the terminal render
every call from this declaration, so none of them decides anything by a
tool's name, and a tool added by a plugin or an MCP server is shown the
same way everywhere (:data:`DEFAULT_SHOWN` when it declares nothing).

The presentation is about arguments only: it never runs anything and never
reads a file. What a call will really change (the text around an edit, a
path outside the workspace) is the tool's preview
(:mod:`tether.tools.preview`).
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from typing import get_args

import msgspec

from tether.tools.preview import ToolKind

__all__ = ["DEFAULT_SHOWN", "NO_EFFECT_KINDS", "TOOL_FIELD", "Change", "ShownLocation", "ToolShown"]

TOOL_FIELD = "tool"
"""The field of a title template that stands for the tool's name (``"{tool} {task_id}"``)."""

_KINDS: tuple[str, ...] = get_args(ToolKind)

NO_EFFECT_KINDS: frozenset[ToolKind] = frozenset({"read", "search", "think"})
"""The kinds of call that change nothing outside the session: a tool of one of them may
be run again after a crash cut a call off (``fetch`` is left out: a request may post)."""


class Change(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Where a call's arguments hold the change it makes to a file.

    ``new`` names the argument with the text written; ``old`` the one with
    the text it replaces (``None``: the call writes the whole file, so the
    change is all additions). ``each`` names an argument holding a list of
    objects with the same ``old`` and ``new`` keys, several changes in one
    call; when a call gives it, it is read instead of ``old`` and ``new``.
    """

    new: str
    old: str | None = None
    each: str | None = None

    def pairs(self, arguments: Mapping[str, object]) -> list[tuple[str | None, str]]:
        """The ``(old text, new text)`` of each change ``arguments`` describe, in order;
        ``old`` is ``None`` for a whole-file write. Values of the wrong type are skipped."""
        many = arguments.get(self.each) if self.each is not None else None
        if isinstance(many, list | tuple):
            return [
                pair
                for item in many
                if isinstance(item, Mapping) and (pair := self._pair(item)) is not None
            ]
        pair = self._pair(arguments)
        return [] if pair is None else [pair]

    def _pair(self, values: Mapping[str, object]) -> tuple[str | None, str] | None:
        new = values.get(self.new)
        if self.old is None:
            return (None, new) if isinstance(new, str) else None
        old = values.get(self.old)
        if not isinstance(old, str):
            return None
        return (old, new if isinstance(new, str) else "")


class ShownLocation(msgspec.Struct, frozen=True):
    """A file a call names (as its argument gives it, or absolute) and the 1-based line."""

    path: str
    line: int | None = None


class ToolShown(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """How one tool's calls are shown.

    ``kind`` is what a call does (ACP's ``ToolKind``). ``title`` is a
    :meth:`str.format` template over the call's arguments and ``{tool}``
    (the tool's name); a call missing an argument the template names is
    titled by the tool's name. ``paths`` name the arguments holding a file
    or directory the call touches (a path argument left out means the
    session's cwd); ``line`` the argument holding the 1-based line the first
    of them starts at. ``hidden`` arguments are left out of a one-line
    summary (they are shown as :attr:`change`). ``command`` names the
    argument holding a shell command, shown as a command line.
    ``shell_tasks`` says a call may start, read or end the session's
    background shell tasks; ``delegates`` that a call runs a child agent
    whose work shows inside the call while it runs.

    The JSON form (``msgspec.json.encode``) is what the web app sends with
    a session's tool calls.

    Raises:
        ValueError: ``kind`` is not a ``ToolKind``, or ``title`` is not a
            template of named fields.
    """

    kind: ToolKind = "other"
    title: str = "{tool}"
    paths: tuple[str, ...] = ()
    line: str | None = None
    hidden: tuple[str, ...] = ()
    change: Change | None = None
    command: str | None = None
    shell_tasks: bool = False
    delegates: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"a tool's kind is one of {', '.join(_KINDS)}, got {self.kind!r}")
        self.title_fields()

    def title_fields(self) -> tuple[str, ...]:
        """The fields :attr:`title` names, ``tool`` among them if it does.

        Raises:
            ValueError: the template is malformed, or has a positional,
                indexed or formatted field.
        """
        fields: list[str] = []
        try:
            parsed = list(string.Formatter().parse(self.title))
        except ValueError as exc:
            raise ValueError(f"title template {self.title!r}: {exc}") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if not name.isidentifier() or spec or conversion:
                raise ValueError(
                    f"title template {self.title!r}: use plain named fields like {{path}}"
                )
            fields.append(name)
        return tuple(fields)

    def arguments(self) -> frozenset[str]:
        """Every argument this presentation names (each must be one the tool takes)."""
        named = {*self.paths, *self.hidden, *self.title_fields()} - {TOOL_FIELD}
        for extra in (self.line, self.command):
            if extra is not None:
                named.add(extra)
        if self.change is not None:
            named.add(self.change.each or self.change.new)
            if self.change.each is None and self.change.old is not None:
                named.add(self.change.old)
        return frozenset(named)

    def title_of(self, tool: str, arguments: Mapping[str, object]) -> str:
        """The title of a call of ``tool`` with ``arguments`` (see :attr:`title`)."""
        values: dict[str, object] = {TOOL_FIELD: tool}
        for name in self.title_fields():
            if name == TOOL_FIELD:
                continue
            value = arguments.get(name)
            if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
                return tool
            values[name] = value
        return self.title.format_map(values)

    def locations(
        self, arguments: Mapping[str, object], cwd: str | None = None
    ) -> list[ShownLocation]:
        """The files a call names: each :attr:`paths` argument (``.`` when left out),
        made absolute against ``cwd`` (a relative one is left out without a ``cwd``),
        the first with the :attr:`line` the call gives."""
        shown: list[ShownLocation] = []
        for name in self.paths:
            path = arguments.get(name)
            if not isinstance(path, str) or not path:
                path = "."
            if not os.path.isabs(path):
                if cwd is None:
                    continue
                path = os.path.normpath(os.path.join(cwd, path))
            shown.append(ShownLocation(path, self._line(arguments) if not shown else None))
        return shown

    def _line(self, arguments: Mapping[str, object]) -> int | None:
        line = arguments.get(self.line) if self.line is not None else None
        if isinstance(line, int) and not isinstance(line, bool) and line >= 1:
            return line
        return None

    def changes(self, arguments: Mapping[str, object]) -> list[tuple[str | None, str]]:
        """The ``(old, new)`` texts of the changes a call makes (see :class:`Change`)."""
        return [] if self.change is None else self.change.pairs(arguments)


DEFAULT_SHOWN = ToolShown()
"""How a tool that declares nothing is shown (an MCP tool, most plugin tools)."""
