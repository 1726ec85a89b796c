"""Walking a directory tree as git sees it: ``.gitignore`` respected, ``.git`` skipped.

The walk yields regular files only. It lists every directory beneath the root
it was given (:mod:`tether.plugins.fs.beneath`) and does not follow symlinks
(a link could lead out of the workspace, or in circles), and skips what the ``.gitignore``
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

from tether.plugins.fs.beneath import Beneath

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


def _rules_in(root: Beneath, directory: str) -> _Rules | None:
    """The rules of the ``.gitignore`` in ``directory`` (beneath ``root``; ``""`` for
    ``root`` itself), if it has any."""
    try:
        lines = root.read(join(directory, IGNORE_FILE)).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    from pathspec import GitIgnoreSpec

    spec = GitIgnoreSpec.from_lines(lines)
    return _Rules(join(root.root, directory), spec) if spec.patterns else None


def join(directory: str, name: str) -> str:
    """``directory/name``, either of them possibly empty (the root)."""
    if not directory or not name:
        return directory or name
    return f"{directory.rstrip('/')}/{name}"


def _exists(root: Beneath, path: str) -> bool:
    try:
        root.stat(path)
    except OSError:
        return False
    return True


def _inherited(start: str) -> list[_Rules]:
    """The rules of the parents of ``start`` (a real absolute path) up to the root of
    its git repository (none outside one)."""
    with Beneath("/") as top:
        if _exists(top, join(start, ".git")[1:]):
            return []
        chain: list[str] = []
        directory = os.path.dirname(start)
        while True:
            chain.append(directory)
            if _exists(top, join(directory, ".git")[1:]):
                break
            parent = os.path.dirname(directory)
            if parent == directory:
                return []  # not in a repository: no parent's rules apply
            directory = parent
        return [rules for d in reversed(chain) if (rules := _rules_in(top, d[1:])) is not None]


def walk(
    root: Beneath, start: str, *, ignore: bool = True
) -> Iterator[tuple[Beneath, str, list[str]]]:
    """The regular files under directory ``start``, a directory at a time (depth
    first, in no set order): the directory opened, its path, its files' names.

    ``start`` and the paths yielded are relative to ``root``; each directory is
    opened beneath it, no symlink followed, and stays open until the next step
    (open its files through it). With ``ignore`` (the default) ``.gitignore``
    rules apply; ``.git`` is always skipped. Directories that cannot be read are
    passed over.
    """
    inherited = _inherited(join(root.root, start).rstrip("/") or "/") if ignore else []
    stack: list[tuple[str, list[_Rules]]] = [(start, inherited)]
    while stack:
        directory, rules = stack.pop()
        try:
            here = root.enter(directory)
        except OSError:
            continue
        with here:
            if ignore:
                own = _rules_in(here, "")
                if own is not None:
                    rules = [*rules, own]
            try:
                entries = here.entries("")
            except OSError:
                continue
            files: list[str] = []
            for name, is_dir in entries:
                if name in ALWAYS_SKIPPED:
                    continue
                path = join(directory, name)
                if rules and any(r.excludes(join(root.root, path), is_dir) for r in rules):
                    continue
                if is_dir:
                    stack.append((path, rules))
                else:
                    files.append(name)
            if files:
                yield here, directory, files
