"""What "always allow" writes: the permission rules a call stands for, scoped as people expect.

Answering "always" to a question writes rules in the language of
:mod:`tether.front.rules` into the session's allow list (logged as
``permission/granted {rule}``, so a load or a resume keeps them). The
rules are as narrow as the call allows while still covering its likes:

* a ``bash`` call — one prefix rule per command of the line: the command
  name (``Bash(ls:*)``), with its subcommand for a tool of several levels
  (``Bash(git status:*)``, ``Bash(docker compose:*)``), and the script for
  a runner (``Bash(npm run test:*)``). A command a prefix would widen to
  anything — an interpreter or a wrapper (``bash -c …``, ``env``,
  ``xargs``, ``python``), an assignment (``FOO=1 cmd``), a multi-level tool
  without a plain subcommand (``git -C x log``) — gets a rule for exactly
  that command instead, and none (a one-time allow) when a word of it holds
  a space or a pattern character, which an exact rule cannot pin;
* an edit (``edit``, ``write``) — every edit under the file's directory,
  relative to the workspace (``Edit(src/pkg/**)``; ``Edit(./**)`` for a
  file at its top);
* any other tool — the tool (``web_fetch``, ``mcp__github__get_issue``).

"Always" writes nothing — it allows the call once, and the person is told
why (:attr:`Always.why_not`) — for a call that needs approval whatever the
mode, one a permission rule asks about, and a command line no rule may
allow: one holding ``$(…)``, backticks or another construct that hides a
command, a command run through ``sudo`` (or ``doas``, ``su``, …), or a
redirection to a protected path or outside the workspace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from tether.front.command_line import CommandLineError, SimpleCommand, simple_commands
from tether.front.rules import FAMILIES, RuleError, parse_rule, write_refusal
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown
from tether.tools.preview import ToolPreview

__all__ = ["MULTI_LEVEL", "RUNNERS", "WIDE", "Always", "always_for"]

MULTI_LEVEL = frozenset(
    {
        "apt",
        "brew",
        "cargo",
        "docker",
        "gh",
        "git",
        "go",
        "helm",
        "kubectl",
        "make",
        "npm",
        "pip",
        "pip3",
        "pnpm",
        "poetry",
        "systemctl",
        "uv",
        "yarn",
    }
)
"""Tools whose first word names what they do: "always" covers that subcommand."""

RUNNERS = frozenset({("npm", "run"), ("pnpm", "run"), ("yarn", "run"), ("uv", "run")})
"""Subcommands that run a script or program named next: "always" covers that one."""

WIDE = frozenset(
    {
        "bash",
        "builtin",
        "command",
        "dash",
        "doas",
        "env",
        "eval",
        "exec",
        "fish",
        "nice",
        "node",
        "nohup",
        "perl",
        "pkexec",
        "python",
        "python3",
        "ruby",
        "run0",
        "sh",
        "ssh",
        "su",
        "sudo",
        "time",
        "timeout",
        "watch",
        "xargs",
        "zsh",
    }
)
"""Commands that run whatever their arguments say: a prefix rule would allow anything."""

_ELEVATING = frozenset({"sudo", "doas", "su", "pkexec", "run0"})
_GLOB = frozenset("*?[")
_UNPINNED = "a word of it holds a space or a pattern character (*, ?, [)"


class Always(NamedTuple):
    """What "always" would write for a call: its ``rules`` (empty: "always" is not
    offered), or ``why_not``."""

    rules: tuple[str, ...]
    why_not: str | None = None

    @property
    def label(self) -> str:
        """The option's text: ``Always allow Bash(git status:*)`` (empty when not offered)."""
        return f"Always allow {', '.join(self.rules)}" if self.rules else ""


def always_for(
    tool: str,
    arguments: Mapping[str, object],
    *,
    preview: ToolPreview | None,
    shown: ToolShown = DEFAULT_SHOWN,
    cwd: str,
) -> Always:
    """What "always" writes for a call of ``tool`` with ``arguments`` in the workspace
    ``cwd`` (``shown`` says which arguments hold its command and paths) — see the
    module docs."""
    if preview is not None and preview.approval is not None:
        return Always((), f"it needs approval every time ({preview.approval})")
    command = arguments.get(shown.command) if shown.command is not None else None
    if tool in FAMILIES["bash"] and isinstance(command, str):
        return _for_command_line(command, os.path.normpath(cwd))
    if tool in FAMILIES["edit"]:
        paths = [arguments.get(name) for name in shown.paths]
        return _for_edit(paths[0] if paths else None, os.path.normpath(cwd))
    try:
        return Always((parse_rule(tool).text,))
    except RuleError:
        return Always((), f"the tool name {tool!r} cannot be written as a rule")


def _for_command_line(line: str, cwd: str) -> Always:
    try:
        commands = simple_commands(line)
    except CommandLineError as exc:
        return Always((), f"the command line cannot be judged by a rule: {exc}")
    rules: list[str] = []
    for command in commands:
        if command.words[0] in _ELEVATING:
            return Always((), f"it runs {command.words[0]}, which no rule may allow")
        for target in command.writes:
            refusal = write_refusal(target, cwd)
            if refusal is not None:
                return Always((), f"{command.words[0]} writes {target!r}, {refusal}")
        specifier = _prefix(command)
        if specifier is None:
            return Always((), f"{command.words[0]} cannot be pinned by a rule: {_UNPINNED}")
        rule = f"Bash({specifier})"
        if rule not in rules:
            rules.append(rule)
    return Always(tuple(rules))


def _prefix(command: SimpleCommand) -> str | None:
    """The specifier of the rule for ``command``: ``WORDS:*`` or the exact command;
    ``None`` when the exact command would be needed and a rule cannot pin it."""
    words = command.words
    name = words[0]
    pinned = not any(_GLOB & set(word) or any(c.isspace() for c in word) for word in words)
    exact = " ".join(words) if pinned else None
    if name in WIDE or "=" in name:
        return exact
    if name not in MULTI_LEVEL:
        return f"{name}:*"
    if len(words) < 2 or words[1].startswith("-"):
        return exact
    if (name, words[1]) in RUNNERS:
        if len(words) < 3 or words[2].startswith("-"):
            return exact
        return f"{name} {words[1]} {words[2]}:*"
    return f"{name} {words[1]}:*"


def _for_edit(path: object, cwd: str) -> Always:
    if not isinstance(path, str) or not path:
        return Always((), "the call names no file")
    if path == "~" or path.startswith("~/"):
        path = os.path.expanduser(path)
    absolute = os.path.normpath(os.path.join(cwd, path))
    if os.path.commonpath([absolute, cwd]) != cwd or absolute == cwd:
        return Always((), "the file is not inside the workspace")
    folder = os.path.relpath(os.path.dirname(absolute), cwd)
    if any(c in _GLOB for c in folder) or ")" in folder:
        return Always((), f"the directory {folder!r} holds a pattern character")
    return Always((f"Edit({'.' if folder == '.' else folder}/**)",))
