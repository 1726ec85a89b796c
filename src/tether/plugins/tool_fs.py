"""The file tools: ``read``, ``write``, ``edit``, ``glob`` and ``grep``.

Paths resolve against the session's cwd, which is the **workspace**; what
lies outside it (after ``..`` and symlinks are resolved) is reached only as
``outside_workspace`` says: ``deny``; ``ask`` (the default) — the call's
preview asks for approval, so a frontend that asks people (the ACP bridge)
puts it to the user whatever the session's mode, and a call nobody approved
is refused; ``allow``.
Once decided, a path is used only in one step beneath its root (the
workspace, or ``/`` for an allowed path outside): see
:mod:`tether.plugins.fs.beneath`.

``read`` shows numbered lines (``offset``/``limit`` page through files of any
size) and refuses binary files. An image (PNG, JPEG, GIF, WebP, told by its
first bytes) is returned as image content when the model that made the call
accepts images, up to ``max_image_bytes``; otherwise it is refused with the
reason. ``write`` creates or overwrites
a file; ``edit`` replaces exact strings, one or several edits to one file
applied all or none. Writes are atomic and keep the file's permission bits.
An existing file is changed only if the model read it in this session and it
has not changed since (see :mod:`tether.plugins.fs.snapshots`). ``glob`` and
``grep`` search the disk, ``.gitignore`` respected.

Reads and writes go through :data:`~tether.plugins.fs.access.FILE_ACCESS`:
the editor's buffers when a frontend serves them for the calling agent, else
the disk. Every failure is an error result with its reason; nothing is left
half-written.

Each tool gives a preview (:mod:`tether.tools.preview`): its kind, the file
and line it touches, and for ``write``/``edit`` the diff it would apply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from msgspec import Meta

from tether.agent.events import AGENT_DISPOSED
from tether.plugins.fs import GrepMode
from tether.plugins.fs.errors import FileToolError
from tether.plugins.fs.images import MAX_IMAGE_BYTES
from tether.plugins.fs.text import READ_LINES
from tether.runtime.schema import Schema
from tether.tools import Change, Tool, ToolExec, ToolShown
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.plugins.fs.edits import Edit
    from tether.plugins.fs.tools import FileTools
    from tether.runtime import Context

name = "tool_fs"
inject = ("tools",)
optional = ("sandbox",)


class Config(Schema, frozen=True):
    """Configuration of the file tools."""

    outside_workspace: Literal["deny", "ask", "allow"] = "ask"
    """Paths outside the session's cwd: refused, asked for, or allowed."""
    max_file_bytes: Annotated[int, Meta(ge=1)] = 32 * 1024 * 1024
    """The largest file ``edit`` and ``write`` handle whole (``read`` pages any size)."""
    max_results: Annotated[int, Meta(ge=1)] = 200
    """The most paths or lines ``glob`` and ``grep`` return unless asked for fewer."""
    durable_writes: bool = False
    """``fsync`` each written file before it is renamed over the old one (slower)."""
    grep_engine: Literal["auto", "rg", "python"] = "auto"
    """What ``grep`` searches with: ripgrep when it is on ``PATH`` (``auto``), or always one."""
    max_image_bytes: Annotated[int, Meta(ge=1)] = MAX_IMAGE_BYTES
    """The largest image ``read`` returns (3.75 MiB: its base64 form fits 5 MiB)."""


class ReadArgs(Schema, frozen=True):
    """Read a text file (or an image, for a model that accepts images)."""

    path: Annotated[str, Meta(description="the file; relative to the session's cwd, or absolute")]
    offset: Annotated[int, Meta(ge=1, description="first line to show (1-based)")] | None = None
    limit: (
        Annotated[int, Meta(ge=1, description=f"how many lines (default {READ_LINES})")] | None
    ) = None


class WriteArgs(Schema, frozen=True):
    """Create or overwrite a file."""

    path: Annotated[str, Meta(description="the file; relative to the session's cwd, or absolute")]
    content: Annotated[str, Meta(description="the whole new content of the file")]


class EditItem(Schema, frozen=True):
    """One exact replacement."""

    old_string: Annotated[str, Meta(description="the exact text to replace")]
    new_string: Annotated[str, Meta(description="what replaces it")]
    replace_all: Annotated[bool, Meta(description="replace every occurrence")] = False


class EditArgs(Schema, frozen=True):
    """Replace exact text in a file: one edit, or several applied all or none."""

    path: Annotated[str, Meta(description="the file; relative to the session's cwd, or absolute")]
    old_string: Annotated[str, Meta(description="the exact text to replace")] | None = None
    new_string: Annotated[str, Meta(description="what replaces it")] | None = None
    replace_all: Annotated[bool, Meta(description="replace every occurrence")] = False
    edits: (
        Annotated[
            tuple[EditItem, ...],
            Meta(description="several edits, applied in order (instead of old_string)"),
        ]
        | None
    ) = None

    def all(self) -> tuple[Edit, ...]:
        """The edits to apply.

        Raises:
            FileToolError: neither or both of ``old_string`` and ``edits``.
        """
        from tether.plugins.fs.edits import Edit

        single = self.old_string is not None or self.new_string is not None
        if single and self.edits is not None:
            raise FileToolError(
                "give either old_string/new_string or edits, not both; call edit again with "
                "one of them"
            )
        if self.edits is not None:
            return tuple(Edit(e.old_string, e.new_string, e.replace_all) for e in self.edits)
        if self.old_string is None or self.new_string is None:
            raise FileToolError(
                "edit needs old_string (the exact text to replace, as read shows it) and "
                "new_string (the text to put there), both strings; or edits, a list of "
                '{"old_string": …, "new_string": …}. To create or replace a whole file, call '
                "the write tool with path and content"
            )
        return (Edit(self.old_string, self.new_string, self.replace_all),)


class GlobArgs(Schema, frozen=True):
    """Find files by name pattern, newest first."""

    pattern: Annotated[str, Meta(description="a glob such as **/*.py or src/*.{c,h}")]
    path: Annotated[str, Meta(description="the directory to search; the cwd")] | None = None


class GrepArgs(Schema, frozen=True):
    """Search file contents with a regular expression."""

    pattern: Annotated[str, Meta(description="a Python regular expression")]
    path: Annotated[str, Meta(description="the file or directory to search; the cwd")] | None = None
    glob: Annotated[str, Meta(description="only files matching this glob")] | None = None
    output_mode: Annotated[
        GrepMode,
        Meta(description="files_with_matches (newest first), content (lines) or count"),
    ] = "files_with_matches"
    context: Annotated[
        int, Meta(ge=0, description="lines of context around each match (content mode)")
    ] = 0
    ignore_case: bool = False
    head_limit: (
        Annotated[int, Meta(ge=1, description="at most this many files or lines")] | None
    ) = None


class LazyTools:
    """The tools' implementation (:class:`~tether.plugins.fs.tools.FileTools`), built on
    the first call; the plugin's registrations call through it."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._config = config
        self._tools: FileTools | None = None

    def get(self) -> FileTools:
        if self._tools is None:
            from tether.plugins.fs.tools import FileTools

            self._tools = FileTools(self._ctx, self._config)
        return self._tools

    def call(self, method: str) -> Callable[[Any, ToolExec], Awaitable[Any]]:
        """A tool function (or preview) that runs ``FileTools.<method>``."""

        async def run(args: Any, exec: ToolExec) -> Any:
            return await getattr(self.get(), method)(args, exec)

        run.__name__ = method
        return run

    def forget(self, agent: Agent) -> None:
        """``agent/disposed``: drop the agent's snapshots (if any call ever ran)."""
        if self._tools is not None:
            self._tools.forget(agent)


READ_SHOWN = ToolShown(kind="read", paths=("path",), line="offset")
"""``read``: the file as a location, at the line it starts from."""
WRITE_SHOWN = ToolShown(
    kind="edit", paths=("path",), hidden=("content",), change=Change(new="content")
)
"""``write``: the file as a location; its content shown as a change, not an argument."""
EDIT_SHOWN = ToolShown(
    kind="edit",
    paths=("path",),
    hidden=("old_string", "new_string", "edits"),
    change=Change(new="new_string", old="old_string", each="edits"),
)
"""``edit``: the file as a location; what it replaces shown as a change."""
SEARCH_SHOWN = ToolShown(kind="search", paths=("path",))
"""``glob`` and ``grep``: the directory (or file) searched as a location."""


def definitions(tools: LazyTools) -> list[Tool[Any]]:
    """The five tools over ``tools``."""
    return [
        Tool(
            name="read",
            description="Read a text file; lines are numbered from 1. Pages through big "
            f"files with offset and limit (default {READ_LINES} lines). Read a file before "
            "editing it. An image file (PNG, JPEG, GIF, WebP) is shown to you as an image "
            "when you accept images.",
            args=ReadArgs,
            execute=tools.call("read"),
            concurrency_safe=True,
            preview=tools.call("preview_read"),
            shown=READ_SHOWN,
        ),
        Tool(
            name="write",
            description="Create a file, or overwrite one read in this session, with the "
            "given content (parent directories are created).",
            args=WriteArgs,
            execute=tools.call("write"),
            preview=tools.call("preview_write"),
            shown=WRITE_SHOWN,
        ),
        Tool(
            name="edit",
            description="Replace exact text in a file read in this session: old_string must "
            "occur once (or set replace_all); several edits in `edits` apply all or none. "
            "Copy old_string from the file without the line-number prefix.",
            args=EditArgs,
            execute=tools.call("edit"),
            preview=tools.call("preview_edit"),
            shown=EDIT_SHOWN,
        ),
        Tool(
            name="glob",
            description="List files matching a glob pattern (e.g. **/*.py), newest first; "
            ".gitignore is respected.",
            args=GlobArgs,
            execute=tools.call("glob"),
            concurrency_safe=True,
            preview=tools.call("preview_glob"),
            shown=SEARCH_SHOWN,
        ),
        Tool(
            name="grep",
            description="Search file contents with a regular expression; .gitignore is "
            "respected. output_mode: files_with_matches (default), content (path:line:text, "
            "with context), count.",
            args=GrepArgs,
            execute=tools.call("grep"),
            concurrency_safe=True,
            preview=tools.call("preview_grep"),
            shown=SEARCH_SHOWN,
        ),
    ]


async def apply(ctx: Context, config: Config) -> None:
    tools = LazyTools(ctx, config)
    registry = ctx.service(TOOLS)
    for definition in definitions(tools):
        await registry.register(definition)
    ctx.on(AGENT_DISPOSED, tools.forget)
