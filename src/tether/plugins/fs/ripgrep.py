"""``grep`` through ripgrep (``rg``), when it is installed: the same answers, faster.

ripgrep is run with the rules of the Python walk (:mod:`tether.plugins.fs.tree`):
``.gitignore`` respected inside or outside a repository (``--no-require-git``),
hidden files searched but ``.git`` never, symlinks not followed, binary
files passed over. The pattern is a Python regular expression; one that
ripgrep's engine does not accept (a look-around, a backreference) makes
:func:`rg_grep` raise :class:`Unsupported`, and the caller searches in Python.

The command runs in a worker thread's subprocess; the call's cancel is checked
every 50 ms and kills it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator

from tether.plugins.fs.errors import FileToolError
from tether.plugins.fs.search import GrepQuery, Hit
from tether.plugins.fs.text import cut

POLL_SECONDS = 0.05


class Unsupported(Exception):
    """ripgrep cannot run this query as Python would; search without it."""


def _command(rg: str, start: str, query: GrepQuery) -> list[str]:
    command = [rg, "--no-config", "--hidden", "--no-require-git", "--glob", "!.git", "--null"]
    if query.ignore_case:
        command.append("--ignore-case")
    if query.glob is not None:
        command += ["--glob", query.glob]
    if query.mode == "files_with_matches":
        command.append("--files-with-matches")
    elif query.mode == "count":
        command.append("--count")
    else:
        command += ["--json", "--context", str(max(query.before, query.after))]
    # ``--regexp`` so a pattern that starts with ``-`` is not read as a flag.
    return [*command, "--regexp", query.pattern, "--", start]


def _run(command: list[str], stopped: Callable[[], bool]) -> bytes:
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as process:
        while True:
            try:
                out, err = process.communicate(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                if stopped():
                    process.kill()
                    process.communicate()
                    raise FileToolError("the search was cancelled") from None
    if process.returncode == 2 and not out:
        raise Unsupported(err.decode("utf-8", errors="replace").strip())
    return out


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def rg_grep(
    rg: str, start: str, query: GrepQuery, *, max_chars: int, stopped: Callable[[], bool]
) -> Iterator[Hit]:
    """The hits of ``query`` under ``start``, as :func:`~tether.plugins.fs.search.grep` gives.

    Raises:
        FileToolError: the search was cancelled.
        Unsupported: ripgrep refused the pattern or the glob.
    """
    out = _run(_command(rg, start, query), stopped)
    if query.mode == "files_with_matches":
        for path in out.split(b"\0"):
            if path.strip(b"\n"):
                name = os.fsdecode(path.strip(b"\n"))
                yield Hit(name, _mtime(name), 1)
        return
    if query.mode == "count":
        for line in out.splitlines():
            path, _, count = line.partition(b"\0")
            if path:
                name = os.fsdecode(path)
                yield Hit(name, _mtime(name), int(count))
        return
    yield from _content(out, max_chars)


def _content(out: bytes, max_chars: int) -> Iterator[Hit]:
    path: str | None = None
    lines: list[tuple[int, str, bool]] = []
    matches = 0
    for raw in out.splitlines():
        message = json.loads(raw)
        kind, data = message.get("type"), message.get("data", {})
        if kind == "begin":
            path, lines, matches = _text(data["path"]), [], 0
        elif kind in ("match", "context") and path is not None:
            text = _text(data["lines"]).rstrip("\n").rstrip("\r")
            lines.append((data["line_number"], cut(text, max_chars), kind == "match"))
            matches += kind == "match"
        elif kind == "end" and path is not None:
            yield Hit(path, _mtime(path), matches, tuple(lines))
            path = None


def _text(field: dict[str, str]) -> str:
    if "text" in field:
        return field["text"]
    import base64

    return base64.b64decode(field["bytes"]).decode("utf-8", errors="replace")
