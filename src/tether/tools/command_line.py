"""A shell command line, split into the simple commands a permission rule is held to.

A rule such as ``Bash(git status:*)`` allows a command by its words. A
command line may hold several commands (``git status; rm -rf ~``, ``a && b``,
``a | b``, ``a & b``, a newline), so each of them is held to the rules on its
own; and some constructs run a command that no word shows (``$(…)``,
backticks, ``<(…)``, ``>(…)``, a subshell or a group in parentheses or
braces, a here-document). :func:`simple_commands` splits the first kind and
refuses the second: a line it refuses never matches an allow rule, whatever
its words, so it is asked about (or denied) instead.

Redirections are taken out of a command's words and kept apart
(:attr:`SimpleCommand.writes`), so that a rule can refuse a write to a file
it must not reach (``git log > .git/hooks/pre-commit``).
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

__all__ = ["CommandLineError", "SimpleCommand", "simple_commands"]

SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;"})
"""Tokens that end one simple command and start the next."""

_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_READS = frozenset({"<", "<>"})
_HIDDEN = ("$(", "`", "<(", ">(", "<<")
"""Text that runs a command no word shows, or feeds one input a rule cannot see."""
_GROUPS = frozenset({"(", ")", "{", "}"})
_PUNCTUATION = ";&|<>()"
_ALL = SEPARATORS | _WRITES | _READS


class CommandLineError(ValueError):
    """A command line that cannot be split into simple commands a rule can judge."""


class SimpleCommand(NamedTuple):
    """One command of a command line: its words (redirections taken out), and the
    targets of its output redirections."""

    words: tuple[str, ...]
    writes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The words, joined by single spaces (what a rule's pattern is matched against)."""
        return " ".join(self.words)


def simple_commands(line: str) -> list[SimpleCommand]:
    """The simple commands of ``line``, in order.

    Raises:
        CommandLineError: ``line`` holds a construct that runs a command no word
            shows, a group, unbalanced quotes, or no command at all.
    """
    for hidden in _HIDDEN:
        if hidden in line:
            raise CommandLineError(f"it holds {hidden!r}, which runs what no rule can see")
    commands: list[SimpleCommand] = []
    for physical in line.splitlines():
        commands += _split(physical)
    if not commands:
        raise CommandLineError("it holds no command")
    return commands


def _split(line: str) -> list[SimpleCommand]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise CommandLineError(f"it cannot be read as shell words ({exc})") from None
    commands: list[SimpleCommand] = []
    words: list[str] = []
    writes: list[str] = []
    at = 0
    while at < len(tokens):
        token = tokens[at]
        if token in SEPARATORS:
            _close(commands, words, writes)
            words, writes = [], []
        elif token in _GROUPS:
            raise CommandLineError(f"it holds {token!r}: a group or subshell")
        elif token and all(char in _PUNCTUATION for char in token) and token not in _ALL:
            raise CommandLineError(f"it holds {token!r}, which no rule can judge")
        elif token in _WRITES or token in _READS:
            if at + 1 >= len(tokens):
                raise CommandLineError(f"the redirection {token!r} has no target")
            at += 1
            if token in _WRITES:
                writes.append(tokens[at])
            if words and words[-1].isdigit():
                words.pop()  # ``2>file``: the descriptor, not a word of the command
        else:
            words.append(token)
        at += 1
    _close(commands, words, writes)
    return commands


def _close(commands: list[SimpleCommand], words: list[str], writes: list[str]) -> None:
    if words:
        commands.append(SimpleCommand(tuple(words), tuple(writes)))
    elif writes:
        raise CommandLineError("a redirection with no command")
