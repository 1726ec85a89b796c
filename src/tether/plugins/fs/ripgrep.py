"""``grep`` through ripgrep (``rg``), when it is installed: the same answers, faster.

ripgrep is run with the rules of the Python walk (:mod:`tether.plugins.fs.tree`):
``.gitignore`` respected inside or outside a repository (``--no-require-git``),
hidden files searched but ``.git`` never, symlinks not followed, binary
files passed over. The pattern is a Python regular expression; one that
ripgrep's engine does not accept (a look-around, a backreference) makes
:func:`rg_grep` raise :class:`Unsupported`, and the caller searches in Python.

ripgrep starts in the searched directory, entered through a descriptor opened
beneath the workspace (:mod:`tether.plugins.fs.beneath`), never by its name.
The command runs in a worker thread's subprocess; the call's cancel is checked
every 50 ms and kills it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator

from tether.plugins.fs.beneath import Beneath
from tether.plugins.fs.errors import FileToolError, failure
from tether.plugins.fs.search import GrepQuery, Hit
from tether.plugins.fs.text import cut
from tether.plugins.fs.tree import join

POLL_SECONDS = 0.05
FD_DIRECTORY = "/proc/self/fd"
"""Where a child process finds the descriptors it inherited, by number (Linux)."""


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


def _run(command: list[str], directory: int, stopped: Callable[[], bool]) -> bytes:
    """Run ``command`` in the open directory ``directory`` (entered by its descriptor)."""
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=f"{FD_DIRECTORY}/{directory}",
        pass_fds=(directory,),
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


def rg_grep(
    rg: str,
    root: Beneath,
    start: str,
    query: GrepQuery,
    *,
    max_chars: int,
    stopped: Callable[[], bool],
) -> Iterator[Hit]:
    """The hits of ``query`` in the directory ``start`` (relative to ``root``), as
    :func:`~tether.plugins.fs.search.grep` gives.

    ripgrep starts in the directory opened beneath ``root`` (its descriptor,
    not its name), so a symlink swapped in after the check cannot send it elsewhere.

    Raises:
        FileToolError: the search was cancelled, or ``start`` cannot be opened.
        Unsupported: ripgrep refused the pattern or the glob, or this system has no
            ``/proc/self/fd`` to enter a directory by its descriptor.
    """
    if not os.path.isdir(FD_DIRECTORY):
        raise Unsupported(f"no {FD_DIRECTORY}")
    try:
        directory = root.open(start, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise failure(exc, start or ".") from None
    try:
        out = _run(_command(rg, ".", query), directory, stopped)
    finally:
        os.close(directory)

    def hit(name: bytes, count: int, lines: tuple[tuple[int, str, bool], ...] = ()) -> Hit:
        path = join(start, os.fsdecode(name).removeprefix("./"))
        try:
            mtime = root.stat(path).st_mtime
        except OSError:
            mtime = 0.0
        return Hit(join(root.root, path), mtime, count, lines)

    if query.mode == "files_with_matches":
        for path in out.split(b"\0"):
            if path.strip(b"\n"):
                yield hit(path.strip(b"\n"), 1)
        return
    if query.mode == "count":
        for line in out.splitlines():
            path, _, count = line.partition(b"\0")
            if path:
                yield hit(path, int(count))
        return
    for name, matches, lines in _content(out, max_chars):
        yield hit(name, matches, lines)


def _content(
    out: bytes, max_chars: int
) -> Iterator[tuple[bytes, int, tuple[tuple[int, str, bool], ...]]]:
    """Each file of ripgrep's ``--json`` output: its path, its matches, its lines."""
    path: bytes | None = None
    lines: list[tuple[int, str, bool]] = []
    matches = 0
    for raw in out.splitlines():
        message = json.loads(raw)
        kind, data = message.get("type"), message.get("data", {})
        if kind == "begin":
            path, lines, matches = os.fsencode(_text(data["path"])), [], 0
        elif kind in ("match", "context") and path is not None:
            text = _text(data["lines"]).rstrip("\n").rstrip("\r")
            lines.append((data["line_number"], cut(text, max_chars), kind == "match"))
            matches += kind == "match"
        elif kind == "end" and path is not None:
            yield path, matches, tuple(lines)
            path = None


def _text(field: dict[str, str]) -> str:
    if "text" in field:
        return field["text"]
    import base64

    return base64.b64decode(field["bytes"]).decode("utf-8", errors="replace")
