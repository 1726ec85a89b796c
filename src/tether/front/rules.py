"""Permission rules: ``allow``, ``ask`` and ``deny`` lists in the syntax people already write.

A rule names a tool, and may narrow it to some of its calls::

    Bash                   every bash call
    Bash(git status)       exactly that command
    Bash(npm run test:*)   a command starting with those words
    Bash(git * main)       ``*`` stands for any words
    Read(./src/**)         a path the call names, as a gitignore-style pattern
    Edit(docs/**)
    WebFetch(domain:example.com)
    mcp__github            every tool of the MCP server ``github``
    mcp__github__get_issue one tool of it

The tool names people know are mapped to tether's tools: ``Bash`` is
``bash``; ``Read`` covers every tool that reads files (``read``, ``glob``,
``grep``); ``Edit`` every tool that changes them (``edit``, ``write``);
``Write``, ``Glob``, ``Grep``, ``Task`` and ``TodoWrite`` name one tool each.
Any other name is a tool's own name.

A path pattern is matched against the absolute path the call names: ``//x``
is the absolute path ``/x``, ``~/x`` is under the user's home, and any
other pattern (``./src/**``, ``src/**``, ``/src/**``) is relative to the
workspace. ``*`` stands for any characters but ``/``, ``**`` for any
characters, ``?`` for one; a pattern naming a directory (``docs/``) covers
what is under it.

A bash call is held to the rules command by command
(:func:`~tether.front.command_line.simple_commands`): it is allowed only
when every command of it matches an allow rule, and denied when any matches
a deny rule. A command line holding what no rule can judge (``$(…)``,
backticks, a subshell, a here-document) never matches an allow rule; nor
does a command run through ``sudo`` (or ``doas``, ``su``, ``pkexec``), nor
one that redirects its output to a protected path
(:data:`PROTECTED_PATHS`) or outside the workspace.

:meth:`Rules.decide` gives the verdict: **deny** wins over **ask**, which
wins over **allow**; no matching rule is no verdict (the session's mode
decides).
"""

from __future__ import annotations

import enum
import fnmatch
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple
from urllib.parse import urlsplit

from tether.front.command_line import CommandLineError, SimpleCommand, simple_commands
from tether.shell.sandbox import PROTECTED
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown

__all__ = [
    "FAMILIES",
    "PROTECTED_PATHS",
    "Decision",
    "Rule",
    "RuleError",
    "Rules",
    "Verdict",
    "parse_rule",
    "write_refusal",
]

FAMILIES: Mapping[str, frozenset[str]] = {
    "bash": frozenset({"bash"}),
    "read": frozenset({"read", "glob", "grep"}),
    "edit": frozenset({"edit", "write"}),
    "write": frozenset({"write"}),
    "glob": frozenset({"glob"}),
    "grep": frozenset({"grep"}),
    "task": frozenset({"task"}),
    "todowrite": frozenset({"todo"}),
    "webfetch": frozenset({"web_fetch"}),
    "websearch": frozenset({"web_search"}),
}
"""The tool names people know (lower case), and the tether tools each covers."""

ELEVATING = frozenset({"sudo", "doas", "su", "pkexec", "run0"})
"""Commands that run another with more privilege: never allowed by a prefix rule."""

PROTECTED_PATHS = PROTECTED
"""Paths in a workspace that run code later or govern an agent (the sandbox's protected
paths): a command writing to one is never allowed by a rule."""

_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_RULE = re.compile(r"^(?P<tool>[A-Za-z0-9_.-]+)(?:\((?P<specifier>.*)\))?$", re.DOTALL)


class RuleError(ValueError):
    """A rule that cannot be read (the message names it and says why)."""


class Decision(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Rule(NamedTuple):
    """One rule: as written, the tool name it gives, and its specifier (``None``: all
    calls of the tool)."""

    text: str
    tool: str
    specifier: str | None


class Verdict(NamedTuple):
    """What the rules decided for a call, and the rules that decided it."""

    decision: Decision
    rules: tuple[str, ...]


def parse_rule(text: str) -> Rule:
    """The rule ``text`` says.

    Raises:
        RuleError: it is empty, has no tool name, an empty or unbalanced
            specifier, or a ``domain:`` specifier without a domain.
    """
    stripped = text.strip()
    matched = _RULE.match(stripped)
    if matched is None:
        raise RuleError(
            f"permission rule {text!r}: write TOOL or TOOL(SPECIFIER), "
            "e.g. Bash(git status:*) or Read(./src/**)"
        )
    specifier = matched["specifier"]
    if specifier is not None:
        specifier = specifier.strip()
        if not specifier:
            raise RuleError(f"permission rule {text!r}: the parentheses are empty")
        if specifier.startswith("domain:") and not specifier.removeprefix("domain:").strip():
            raise RuleError(f"permission rule {text!r}: give the domain after 'domain:'")
    return Rule(stripped, matched["tool"], specifier)


class Rules:
    """The ``allow``, ``ask`` and ``deny`` rules of a session, read once.

    Raises:
        RuleError: a rule cannot be read (see :func:`parse_rule`).
    """

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        ask: Iterable[str] = (),
        deny: Iterable[str] = (),
    ) -> None:
        self.lists: dict[Decision, tuple[Rule, ...]] = {
            Decision.ALLOW: tuple(parse_rule(text) for text in allow),
            Decision.ASK: tuple(parse_rule(text) for text in ask),
            Decision.DENY: tuple(parse_rule(text) for text in deny),
        }

    def __bool__(self) -> bool:
        return any(self.lists.values())

    def with_allowed(self, text: str) -> Rules:
        """These rules with ``text`` added to the allow list (an "always allow").

        Raises:
            RuleError: ``text`` cannot be read.
        """
        added = Rules()
        added.lists = dict(self.lists)
        added.lists[Decision.ALLOW] = (*self.lists[Decision.ALLOW], parse_rule(text))
        return added

    def decide(
        self,
        tool: str,
        arguments: Mapping[str, object],
        *,
        shown: ToolShown = DEFAULT_SHOWN,
        cwd: str,
        home: str | None = None,
    ) -> Verdict | None:
        """The verdict of the rules on a call of ``tool`` with ``arguments`` (``shown``
        says which arguments hold its command and paths), in the workspace ``cwd``;
        ``None`` when no rule speaks of it."""
        call = _Call(tool, arguments, shown, cwd, home or os.path.expanduser("~"))
        for decision in (Decision.DENY, Decision.ASK):
            hits = tuple(rule.text for rule in self.lists[decision] if call.any_part(rule))
            if hits:
                return Verdict(decision, hits)
        allowed = call.allowed_by(self.lists[Decision.ALLOW])
        return None if allowed is None else Verdict(Decision.ALLOW, allowed)


class _Call:
    """One call, as the rules see it: its tool, its commands or its paths."""

    def __init__(
        self,
        tool: str,
        arguments: Mapping[str, object],
        shown: ToolShown,
        cwd: str,
        home: str,
    ) -> None:
        self.tool = tool
        self.arguments = arguments
        self.cwd = os.path.normpath(cwd)
        self.home = home
        command = arguments.get(shown.command) if shown.command is not None else None
        self.command = command if isinstance(command, str) else None
        self.paths = [self._absolute(arguments.get(name)) for name in shown.paths]

    def _absolute(self, value: object) -> str:
        path = value if isinstance(value, str) and value else "."
        if path == "~" or path.startswith("~/"):
            path = self.home + path[1:]
        return os.path.normpath(os.path.join(self.cwd, path))

    def commands(self) -> list[SimpleCommand] | None:
        if self.command is None:
            return None
        try:
            return simple_commands(self.command)
        except CommandLineError:
            return None

    def names(self, rule: Rule) -> bool:
        """Whether ``rule`` names this call's tool."""
        family = FAMILIES.get(rule.tool.lower())
        if family is not None:
            return self.tool in family
        if rule.tool == self.tool:
            return True
        # ``mcp__server`` (and ``mcp__server__*``) name every tool of the server.
        server = rule.tool.removesuffix("__*")
        return server.startswith("mcp__") and self.tool.startswith(server + "__")

    def any_part(self, rule: Rule) -> bool:
        """Whether ``rule`` speaks of this call, or of any command of it (deny and ask)."""
        if not self.names(rule):
            return False
        if rule.specifier is None:
            return True
        if self.command is not None:
            commands = self.commands()
            if commands is None:  # what cannot be split is held to the rule as a whole
                return _command_matches(rule.specifier, self.command.split())
            return any(_command_matches(rule.specifier, c.words) for c in commands)
        return self._other_matches(rule.specifier)

    def allowed_by(self, rules: Sequence[Rule]) -> tuple[str, ...] | None:
        """The allow rules that together allow this call, or ``None`` when they do not."""
        named = [rule for rule in rules if self.names(rule)]
        if not named:
            return None
        whole = next((rule for rule in named if rule.specifier is None), None)
        if whole is not None:
            return (whole.text,)
        if self.command is None:
            hits = tuple(r.text for r in named if r.specifier and self._other_matches(r.specifier))
            return hits[:1] or None
        commands = self.commands()
        if commands is None:
            return None  # what cannot be judged command by command is never allowed
        used: list[str] = []
        for command in commands:
            if not self._may_run(command):
                return None
            rule = next(
                (r for r in named if r.specifier and _command_matches(r.specifier, command.words)),
                None,
            )
            if rule is None:
                return None
            if rule.text not in used:
                used.append(rule.text)
        return tuple(used)

    def _may_run(self, command: SimpleCommand) -> bool:
        """Whether an allow rule may allow ``command`` at all: not one that elevates,
        nor one writing to a protected path or outside the workspace."""
        if command.words[0] in ELEVATING:
            return False
        return all(self._may_write(target) for target in command.writes)

    def _may_write(self, target: str) -> bool:
        return write_refusal(target, self.cwd, self.home) is None

    def _other_matches(self, specifier: str) -> bool:
        if specifier.startswith("domain:"):
            return self._domain_matches(specifier.removeprefix("domain:").strip().lower())
        if not self.paths:
            return False
        pattern = _path_pattern(specifier, self.cwd, self.home)
        return all(pattern.match(path) for path in self.paths)

    def _domain_matches(self, domain: str) -> bool:
        url = self.arguments.get("url")
        if not isinstance(url, str):
            return False
        host = (urlsplit(url).hostname or "").lower()
        return host == domain or host.endswith("." + domain)


def write_refusal(target: str, cwd: str, home: str | None = None) -> str | None:
    """Why no allow rule may let a command redirect its output to ``target`` (in the
    workspace ``cwd``): a protected path, or a path outside the workspace; ``None``
    for a target a rule may allow (a descriptor, a device, a file of the workspace)."""
    if target.isdigit() or target == "-" or target in _DEVICES:
        return None  # a descriptor (``2>&1``), or a device that keeps nothing
    if target == "~" or target.startswith("~/"):
        target = (home or os.path.expanduser("~")) + target[1:]
    workspace = os.path.normpath(cwd)
    path = os.path.normpath(os.path.join(workspace, target))
    if os.path.commonpath([path, workspace]) != workspace:
        return "outside the workspace"
    inside = os.path.relpath(path, workspace)
    if any(inside == p or inside.startswith(p + os.sep) for p in PROTECTED_PATHS):
        return "a protected path"
    return None


def _command_matches(specifier: str, words: Sequence[str]) -> bool:
    """Whether a command of ``words`` matches the bash specifier: ``PREFIX:*`` its first
    words, otherwise the whole command, ``*`` standing for any words."""
    text = " ".join(words)
    if specifier.endswith(":*"):
        prefix = " ".join(specifier.removesuffix(":*").split())
        return text == prefix or text.startswith(prefix + " ")
    pattern = " ".join(specifier.split())
    if "*" not in pattern:
        return text == pattern
    return fnmatch.fnmatchcase(text, pattern)


def _path_pattern(specifier: str, cwd: str, home: str) -> re.Pattern[str]:
    """The absolute-path pattern of a path specifier (see the module docs)."""
    if specifier.startswith("//"):
        base, rest = "/", specifier[2:]
    elif specifier.startswith("~/"):
        base, rest = home, specifier[2:]
    else:
        base, rest = cwd, specifier.lstrip("/").removeprefix("./")
        if "/" not in rest.rstrip("/"):
            rest = "**/" + rest  # a bare name matches at any depth, as in .gitignore
    if rest.endswith("/"):
        rest += "**"
    return re.compile(_glob_regex(os.path.normpath(os.path.join(base, rest))))


def _glob_regex(pattern: str) -> str:
    """A regular expression of a glob: ``**`` any characters (``**/`` any directories,
    none included), ``*`` any but ``/``, ``?`` one character but ``/``; ``/**`` at the
    end also matches the directory itself."""
    out: list[str] = []
    at = 0
    while at < len(pattern):
        if pattern.startswith("/**", at) and at + 3 == len(pattern):
            out.append("(?:/.*)?")
            at += 3
        elif pattern.startswith("**/", at):
            out.append("(?:.*/)?")
            at += 3
        elif pattern.startswith("**", at):
            out.append(".*")
            at += 2
        elif pattern[at] == "*":
            out.append("[^/]*")
            at += 1
        elif pattern[at] == "?":
            out.append("[^/]")
            at += 1
        else:
            out.append(re.escape(pattern[at]))
            at += 1
    return "".join(out) + r"\Z"
