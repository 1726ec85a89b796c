"""Walking a directory tree as git sees it: ``.gitignore`` respected, ``.git`` skipped.

The walk yields regular files only. It does not follow symlinks (a link could
lead out of the workspace, or in circles), and skips what the ``.gitignore``
files of the walked directories — and of their parents up to the repository
root — exclude. Each ``.gitignore`` applies to the paths below its own
directory; a path is skipped when any of them excludes it (a negation in a
deeper file does not re-include what a shallower one excluded).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from pathspec import PathSpec

IGNORE_FILE = ".gitignore"
ALWAYS_SKIPPED = frozenset({".git"})


class _Rules(msgspec.Struct, frozen=True):
    base: str
    spec: PathSpec[Any]

    def excludes(self, path: str, is_dir: bool) -> bool:
        # ``path`` lies under ``base`` (the walk built it from there): a slice, not relpath.
        rel = path[len(self.base) + 1 :]
        if os.sep != "/":
            rel = rel.replace(os.sep, "/")
        return self.spec.match_file(rel + "/" if is_dir else rel)


def _rules_in(directory: str) -> _Rules | None:
    try:
        with open(os.path.join(directory, IGNORE_FILE), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    from pathspec import GitIgnoreSpec

    spec = GitIgnoreSpec.from_lines(lines)
    return _Rules(directory, spec) if spec.patterns else None


def _inherited(start: str) -> list[_Rules]:
    """The rules of ``start``'s parents up to the root of its git repository (none outside one)."""
    if os.path.exists(os.path.join(start, ".git")):
        return []
    chain: list[str] = []
    directory = os.path.dirname(start)
    while True:
        chain.append(directory)
        if os.path.exists(os.path.join(directory, ".git")):
            break
        parent = os.path.dirname(directory)
        if parent == directory:
            return []  # not in a repository: no parent's rules apply
        directory = parent
    return [rules for d in reversed(chain) if (rules := _rules_in(d)) is not None]


def walk(start: str, *, ignore: bool = True) -> Iterator[os.DirEntry[str]]:
    """The regular files under directory ``start`` (depth first, in no set order).

    With ``ignore`` (the default) ``.gitignore`` rules apply; ``.git`` is always skipped.
    Directories that cannot be read are passed over.
    """
    inherited = _inherited(start) if ignore else []
    stack: list[tuple[str, list[_Rules]]] = [(start, inherited)]
    while stack:
        directory, rules = stack.pop()
        if ignore:
            own = _rules_in(directory)
            if own is not None:
                rules = [*rules, own]
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.name in ALWAYS_SKIPPED:
                continue
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            if rules and any(r.excludes(entry.path, is_dir) for r in rules):
                continue
            if is_dir:
                stack.append((entry.path, rules))
            else:
                yield entry
