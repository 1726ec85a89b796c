"""The file tools' implementation: what each call does (see :mod:`tether.plugins.tool_fs`).

Imported on the first call of a file tool, not when the plugin loads: start-up
time is a measured target, and most runs never touch a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import msgspec

from tether.content import ImageRef
from tether.llm.catalog import ModelCatalog
from tether.llm.service import LLM
from tether.plugins.fs.access import FILE_ACCESS, DiskFiles, FileAccess
from tether.plugins.fs.beneath import Beneath
from tether.plugins.fs.edits import apply_edits
from tether.plugins.fs.errors import FileToolError, failure, next_call
from tether.plugins.fs.images import ImageFileError
from tether.plugins.fs.search import GrepQuery, Hit, glob_files, grep
from tether.plugins.fs.snapshots import FileLocks, Snapshot, Snapshots
from tether.plugins.fs.text import MAX_LINE_CHARS, READ_LINES, cut
from tether.plugins.fs.tree import join
from tether.plugins.fs.workspace import Resolved, Workspace
from tether.shell.sandbox import SANDBOX
from tether.tools import ToolExec, ToolOutput
from tether.tools.preview import Diff, Location, ToolKind, ToolPreview

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.plugins.tool_fs import (
        Config,
        EditArgs,
        GlobArgs,
        GrepArgs,
        ReadArgs,
        WriteArgs,
    )
    from tether.runtime import Context

log = logging.getLogger(__name__)


class _Target(msgspec.Struct, frozen=True):
    resolved: Resolved
    access: FileAccess
    owner: str
    agent: Agent | None = None

    def saw(self, snapshots: Snapshots, path: str, snapshot: Snapshot) -> None:
        """Record (and log to the agent's session) that the model now knows ``path``."""
        session = None if self.agent is None else self.agent.session
        snapshots.saw(self.owner, path, snapshot, session)


class FileTools:
    """The five tools, their previews, and the snapshot tables."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._config = config
        self._disk = DiskFiles(config.max_file_bytes, durable=config.durable_writes)
        self.snapshots = Snapshots()
        self.locks = FileLocks()

    # -- common -----------------------------------------------------------------

    async def _target(self, path: str, exec: ToolExec, *, write: bool = False) -> _Target:
        """Resolve ``path`` for ``exec`` and check it may be reached (written, with ``write``).

        Raises:
            FileToolError: outside the workspace, and not allowed; or denied by
                the sandbox policy (a protected or unreadable path, a write
                outside the writable roots).
        """
        resolved = self._workspace(exec).resolve(path)
        refusal = self._outside_refusal(resolved, exec) or self._sandbox_refusal(
            resolved.real, exec, write=write
        )
        if refusal is not None:
            raise FileToolError(refusal)
        owner = exec.agent.id if exec.agent is not None else ""
        if exec.agent is not None:
            self.snapshots.restore(owner, exec.agent.session)
        return _Target(resolved, await self._access(exec), owner, exec.agent)

    async def _access(self, exec: ToolExec) -> FileAccess:
        """The editor's buffers when a frontend serves them for the caller, else the disk."""
        if exec.agent is None:
            return self._disk
        access = await self._ctx.serial(FILE_ACCESS, exec.agent, self._disk)
        return access if access is not None else self._disk

    def _workspace(self, exec: ToolExec) -> Workspace:
        return Workspace(exec.cwd or os.getcwd())

    def _sandbox_refusal(self, real: str, exec: ToolExec, *, write: bool) -> str | None:
        """Why the sandbox policy denies this access to the real path ``real``: the same
        rules a confined command meets (see :mod:`tether.shell.sandbox`), but for a
        write outside the workspace, which ``outside_workspace`` governs."""
        sandbox = self._ctx.get(SANDBOX)
        if sandbox is None:
            return None
        agent = exec.agent
        policy = sandbox.policy_for(
            exec.cwd or os.getcwd(),
            agent.id if agent is not None else None,
            agent.session.settings.options if agent is not None else None,
            spawn=False,
        )
        refusal = policy.refusal(real, write=write, outside_writes=True)
        if refusal is None and not write:
            covered = [
                path for path in policy.unreadable if path.startswith(real.rstrip("/") + "/")
            ]
            if covered:
                refusal = (
                    f"{real} holds {covered[0]}, unreadable in the sandbox: search a narrower "
                    "directory"
                )
        return refusal

    def _outside_refusal(self, resolved: Resolved, exec: ToolExec) -> str | None:
        if resolved.inside:
            return None
        mode = self._config.outside_workspace
        if mode == "allow" or (mode == "ask" and exec.approved):
            return None
        where = self._workspace(exec).root
        if mode == "deny":
            return (
                f"{resolved.shown} is outside the workspace ({where}); access there is denied: "
                "use a path inside it"
            )
        return (
            f"{resolved.shown} is outside the workspace ({where}); it needs the user's "
            "approval, and none was given"
        )

    def _approval(self, resolved: Resolved) -> str | None:
        if resolved.inside or self._config.outside_workspace != "ask":
            return None
        return f"{resolved.real} is outside the workspace"

    def _preview(
        self,
        kind: ToolKind,
        title: str,
        resolved: Resolved,
        line: int | None = None,
        diffs: tuple[Diff, ...] = (),
    ) -> ToolPreview:
        return ToolPreview(
            kind=kind,
            title=title,
            locations=(Location(resolved.real, line),),
            diffs=diffs,
            approval=self._approval(resolved),
        )

    # -- read --------------------------------------------------------------------

    async def read(self, args: ReadArgs, exec: ToolExec) -> ToolOutput:
        try:
            target = await self._target(args.path, exec)
            page, snapshot = await target.access.read(
                target.resolved, args.offset or 1, args.limit or READ_LINES
            )
        except ImageFileError as image:
            return await self._read_image(target, args.path, image, exec)
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        target.saw(self.snapshots, target.resolved.real, snapshot)
        return ToolOutput(page.render(args.path))

    async def _read_image(
        self, target: _Target, shown: str, image: ImageFileError, exec: ToolExec
    ) -> ToolOutput:
        """The image ``read`` found, as image content if the calling model accepts
        images, else the refusal with the reason. Images are read from the disk."""
        refusal = self._image_refusal(exec)
        if refusal is not None:
            return ToolOutput(f"{image.message}; {refusal}", is_error=True)
        real = target.resolved.real
        try:
            media_type, data, snapshot = await self._disk.read_image(
                target.resolved, self._config.max_image_bytes
            )
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        target.saw(self.snapshots, real, snapshot)
        return ToolOutput(
            f"{shown}: {media_type}, {len(data):,} bytes (the image is attached)",
            images=(ImageRef.inline(media_type, data),),
        )

    def _image_refusal(self, exec: ToolExec) -> str | None:
        """Why the model of ``exec`` gets no image; ``None`` when it accepts images."""
        model = exec.model
        if model is None:
            return "images are returned only to a model that accepts them"
        llm = self._ctx.get(LLM)
        catalog = llm.catalog if llm is not None else ModelCatalog()
        if catalog.accepts_images(model):
            return None
        return (
            f"the model in use ({model}) does not accept images "
            "(if it does, set images: true in its entry of the llm models settings)"
        )

    async def preview_read(self, args: ReadArgs, exec: ToolExec) -> ToolPreview:
        resolved = self._workspace(exec).resolve(args.path)
        return self._preview("read", f"read {args.path}", resolved, args.offset or 1)

    # -- write -------------------------------------------------------------------

    async def write(self, args: WriteArgs, exec: ToolExec) -> ToolOutput:
        try:
            target = await self._target(args.path, exec, write=True)
            real = target.resolved.real
            async with self.locks.hold(real):
                existed = await self._check_fresh(target)
                written = await self.locks.finish(
                    target.access.write_text(target.resolved, args.content)
                )
                target.saw(self.snapshots, real, written)
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        lines = args.content.count("\n") + (0 if args.content.endswith("\n") else 1)
        lines = lines if args.content else 0
        verb = "overwrote" if existed else "created"
        noun = "line" if lines == 1 else "lines"
        return ToolOutput(f"{verb} {args.path} ({lines} {noun})")

    async def _check_fresh(self, target: _Target) -> bool:
        """Whether the file exists; refuse if it does and the model's view of it is stale.

        Raises:
            FileToolError: a directory, never read, or changed since it was read.
        """
        resolved = target.resolved
        version = await target.access.version(resolved)
        if version is None:
            return False
        current = await target.access.read_text(resolved)
        self.snapshots.check(target.owner, resolved.real, resolved.shown, current.snapshot)
        return True

    async def preview_write(self, args: WriteArgs, exec: ToolExec) -> ToolPreview:
        target = await self._target_for_preview(args.path, exec)
        old: str | None = None
        try:
            if target is not None and await target.access.version(target.resolved) is not None:
                old = (await target.access.read_text(target.resolved)).text
        except FileToolError:
            old = None
        resolved = self._workspace(exec).resolve(args.path)
        diff = Diff(resolved.real, old, args.content)
        return self._preview("edit", f"write {args.path}", resolved, 1, (diff,))

    async def _target_for_preview(self, path: str, exec: ToolExec) -> _Target | None:
        """The target of a preview: as for the call, but reachable regardless of approval."""
        resolved = self._workspace(exec).resolve(path)
        if not resolved.inside and self._config.outside_workspace == "deny":
            return None
        access = await self._access(exec)
        owner = exec.agent.id if exec.agent is not None else ""
        return _Target(resolved, access, owner)

    # -- edit --------------------------------------------------------------------

    async def edit(self, args: EditArgs, exec: ToolExec) -> ToolOutput:
        try:
            edits = args.all()
            target = await self._target(args.path, exec, write=True)
            real = target.resolved.real
            async with self.locks.hold(real):
                current = await target.access.read_text(target.resolved)
                self.snapshots.check(target.owner, real, args.path, current.snapshot)
                edited = apply_edits(current.text, edits, args.path)
                written = await self.locks.finish(
                    target.access.write_text(target.resolved, edited.text)
                )
                target.saw(self.snapshots, real, written)
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        plural = "" if edited.replacements == 1 else "s"
        line = edited.first_line
        return ToolOutput(
            f"edited {args.path}: {edited.replacements} replacement{plural}; "
            f"the first change is at line {line}:\n"
            + _excerpt(edited.text, edited.first_offset, line)
        )

    async def preview_edit(self, args: EditArgs, exec: ToolExec) -> ToolPreview:
        resolved = self._workspace(exec).resolve(args.path)
        target = await self._target_for_preview(args.path, exec)
        if target is None:
            return self._preview("edit", f"edit {args.path}", resolved)
        try:
            current = await target.access.read_text(target.resolved)
            edited = apply_edits(current.text, args.all(), args.path)
        except FileToolError:
            # The call will fail with the reason; there is no diff to show.
            return self._preview("edit", f"edit {args.path}", resolved)
        diff = Diff(resolved.real, current.text, edited.text)
        return self._preview("edit", f"edit {args.path}", resolved, edited.first_line, (diff,))

    # -- glob, grep ------------------------------------------------------------------

    def _directory(self, path: str | None, exec: ToolExec) -> tuple[Workspace, Resolved]:
        """Resolve the place a search starts from (blocking: run it in a thread).

        Raises:
            FileToolError: outside the workspace and not allowed.
        """
        workspace = self._workspace(exec)
        resolved = workspace.resolve(path or ".")
        refusal = self._outside_refusal(resolved, exec) or self._sandbox_refusal(
            resolved.real, exec, write=False
        )
        if refusal is not None:
            raise FileToolError(refusal)
        return workspace, resolved

    async def glob(self, args: GlobArgs, exec: ToolExec) -> ToolOutput:
        def search() -> tuple[Workspace, list[str]]:
            workspace, resolved = self._directory(args.path, exec)
            with _searched(resolved) as (root, is_file):
                if is_file:
                    raise FileToolError(
                        f"{resolved.shown} is not a directory; give a directory as path, "
                        f"or {next_call('read', path=resolved.shown)}"
                    )
                found = glob_files(root, resolved.beneath, args.pattern, _stopped(exec))
            return workspace, [join(resolved.root, path) for path in found]

        try:
            workspace, found = await asyncio.to_thread(search)
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        if not found:
            return ToolOutput(f"no files match {args.pattern}")
        return ToolOutput(_listed([workspace.relative(p) for p in found], self._config.max_results))

    async def grep(self, args: GrepArgs, exec: ToolExec) -> ToolOutput:
        query = GrepQuery(
            pattern=args.pattern,
            mode=args.output_mode,
            glob=args.glob,
            ignore_case=args.ignore_case,
            before=args.context,
            after=args.context,
        )
        limit = args.head_limit or self._config.max_results

        def search() -> tuple[Workspace, list[Hit]]:
            workspace, resolved = self._directory(args.path, exec)
            with _searched(resolved) as (root, is_file):
                return workspace, self._search(
                    root, resolved.beneath, is_file, query, _stopped(exec)
                )

        try:
            workspace, hits = await asyncio.to_thread(search)
        except FileToolError as exc:
            return ToolOutput(exc.message, is_error=True)
        if not hits:
            return ToolOutput(f"no matches for {args.pattern}")
        if query.mode == "files_with_matches":
            hits.sort(key=lambda hit: (-hit.mtime, hit.path))
            return ToolOutput(_listed([workspace.relative(h.path) for h in hits], limit))
        hits.sort(key=lambda hit: hit.path)
        if query.mode == "count":
            rows = [f"{workspace.relative(h.path)}:{h.count}" for h in hits]
            return ToolOutput(_listed(rows, limit))
        rows = []
        for hit in hits:
            shown = workspace.relative(hit.path)
            previous: int | None = None
            for number, text, matched in hit.lines:
                if previous is not None and number != previous + 1 and query.before:
                    rows.append("--")
                rows.append(
                    f"{shown}{':' if matched else '-'}{number}{':' if matched else '-'}{text}"
                )
                previous = number
        return ToolOutput(_listed(rows, limit))

    def _search(
        self,
        root: Beneath,
        start: str,
        is_file: bool,
        query: GrepQuery,
        stopped: Callable[[], bool],
    ) -> list[Hit]:
        """Every hit of ``query`` under ``start`` (beneath ``root``; the file ``start``
        when ``is_file``): with ripgrep when the engine setting lets it and it accepts
        the query, else in Python (blocking).

        Raises:
            FileToolError: an invalid regex or glob, ripgrep chosen but missing, or cancelled.
        """
        import shutil

        from tether.plugins.fs.ripgrep import Unsupported, rg_grep

        query.compile()  # the pattern is a Python regex, whoever runs it
        engine = self._config.grep_engine
        rg = shutil.which("rg") if engine != "python" else None
        if engine == "rg" and rg is None:
            raise FileToolError("grep_engine is rg, but rg is not installed")
        if rg is not None and not is_file:
            try:
                hits = rg_grep(rg, root, start, query, max_chars=MAX_LINE_CHARS, stopped=stopped)
                return list(hits)
            except Unsupported as exc:
                log.info("ripgrep refused %r (%s); searching in Python", query.pattern, exc)
        return list(grep(root, start, query, max_chars=MAX_LINE_CHARS, stopped=stopped))

    async def preview_glob(self, args: GlobArgs, exec: ToolExec) -> ToolPreview:
        resolved = self._workspace(exec).resolve(args.path or ".")
        return self._preview("search", f"glob {args.pattern}", resolved)

    async def preview_grep(self, args: GrepArgs, exec: ToolExec) -> ToolPreview:
        resolved = self._workspace(exec).resolve(args.path or ".")
        return self._preview("search", f"grep {args.pattern}", resolved)

    def forget(self, agent: Agent) -> None:
        """``agent/disposed``: drop the agent's snapshots."""
        self.snapshots.forget(agent.id)


@contextmanager
def _searched(resolved: Resolved) -> Iterator[tuple[Beneath, bool]]:
    """The root ``resolved`` lies beneath, open, and whether it names a file (else a directory).

    Raises:
        FileToolError: it does not exist, or cannot be reached beneath its root.
    """
    try:
        root = Beneath(resolved.root)
    except OSError as exc:
        raise failure(exc, resolved.shown) from None
    with root:
        try:
            is_file = stat.S_ISREG(root.stat(resolved.beneath).st_mode)
        except OSError as exc:
            raise failure(exc, resolved.shown) from None
        yield root, is_file


def _stopped(exec: ToolExec) -> Callable[[], bool]:
    """Whether the call was cancelled: asked by a search running in a worker thread."""
    signal = exec.signal
    return lambda: signal.cancelled


def _listed(rows: list[str], limit: int) -> str:
    shown = "\n".join(rows[:limit])
    if len(rows) > limit:
        shown += f"\n[{len(rows) - limit} more not shown; narrow the search]"
    return shown


def _excerpt(text: str, offset: int, line: int, around: int = 3) -> str:
    """The lines around the one holding ``offset`` (line ``line``), numbered; found
    from the offset, without splitting the whole text (it may be megabytes)."""
    begin, first = text.rfind("\n", 0, offset) + 1, line
    while begin > 0 and line - first < around:
        begin = text.rfind("\n", 0, begin - 1) + 1
        first -= 1
    end = offset
    for _ in range(around + 1):
        found = text.find("\n", end)
        if found < 0:
            end = len(text)
            break
        end = found + 1
    lines = text[begin:end].split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "\n".join(
        f"{n:>6}\t{cut(piece, MAX_LINE_CHARS)}" for n, piece in enumerate(lines, first)
    )
