"""The built-in ``offline`` provider: a scripted model, **not an LLM**.

It is the embedded default, so that tether runs end to end — prompts, tool
calls, streaming, cancel — with no network and no API key. It understands
nothing; it answers from the request's messages alone, deterministically:

* the last message is a user prompt starting with ``"$ "``: it calls the
  ``bash`` tool with the rest as the command;
* a prompt starting with ``"& "``: the same, with ``"run_in_background": true``;
* a prompt ``"/tool NAME {json}"``: it calls tool ``NAME`` with those
  arguments (so any tool, a plugin's included, can be exercised offline);
* the file directives (the same words a real model would understand):

  - ``read PATH`` calls ``read``;
  - ``write PATH: TEXT`` calls ``write`` with ``TEXT`` (and a final newline);
  - ``edit PATH: OLD => NEW`` calls ``read``, then — once the read succeeded —
    ``edit`` replacing ``OLD`` with ``NEW``, as a careful model does;
  - ``grep PATTERN`` (or ``grep PATTERN in PATH``) calls ``grep`` in content mode;
  - ``glob PATTERN`` calls ``glob``;

* the last message is a tool result: it answers with a short summary of it
  (its first lines, the exit code when the output reports one, and the type
  of each image it carries: the offline model accepts images, so ``read
  PATH`` of an image exercises image results) — unless the directive has a
  next call to make;
* anything else: a short reply that echoes the prompt and says how to
  configure a real model.

When the request offers no ``bash`` tool, a ``"$ "`` or ``"& "`` prompt gets a
text reply saying so instead of a call; the same for a file directive whose
tool is not offered.

The answer streams in pieces of ``chunk_size`` characters (tool-call arguments
too), yielding to the event loop and checking the cancel signal between
pieces, with a :class:`Usage` (counted in words) and a :class:`Finish`
(``"tool-calls"`` after a call, ``"stop"`` otherwise) at the end.

Mount it under the ``llm`` service::

    await ctx.plugin(tether.llm.offline, {"chunk_size": 8})
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Iterator
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta

from tether.content import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta, Usage
from tether.llm.request import ModelRequest
from tether.llm.service import LLM
from tether.runtime.schema import Schema
from tether.runtime.signal import CancelSignal

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["PROVIDER", "Config", "OfflineModel", "apply", "inject", "name"]

PROVIDER = "offline"
"""The provider name the adapter registers under (``--model offline``)."""

BASH_TOOL = "bash"

CONFIGURE_HINT = (
    "To talk to a real model, configure one, e.g. "
    "--model deepseek:deepseek-chat with DEEPSEEK_API_KEY set."
)

_FOREGROUND = "$ "
_BACKGROUND = "& "
_TOOL = "/tool "
_SUMMARY_LINES = 5
_SUMMARY_CHARS = 300
_ECHO_CHARS = 200
_WORD = re.compile(r"\S+")
"""A word, as ``str.split()`` finds them."""
_EXIT_CODE = re.compile(r"\bexit(?:ed with)?[ _]code\W{0,3}(-?\d+)", re.IGNORECASE)


class OfflineModel(msgspec.Struct, frozen=True):
    """The scripted model adapter; see the module docstring.

    Raises:
        ValueError: ``chunk_size`` is less than 1.
    """

    chunk_size: int = 8
    name: str = PROVIDER

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"OfflineModel.chunk_size must be >= 1, got {self.chunk_size}")

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncGenerator[StreamChunk, None]:
        """Stream the scripted answer to ``request``; ends with ``Finish("aborted")`` on cancel."""
        answer = _answer(request)
        for chunk in self._chunks(answer):
            # Give the loop a turn between pieces, as a network stream would,
            # so that consumers and cancels interleave with it.
            await asyncio.sleep(0)
            if signal.cancelled:
                yield Finish("aborted")
                return
            yield chunk
        output = answer.text if isinstance(answer, TextBlock) else json.dumps(answer.arguments)
        yield Usage(input_tokens=_words_in(request), output_tokens=len(output.split()))
        yield Finish("tool-calls" if isinstance(answer, ToolCallBlock) else "stop")

    def _chunks(self, answer: TextBlock | ToolCallBlock) -> Iterator[StreamChunk]:
        if isinstance(answer, TextBlock):
            for piece in _pieces(answer.text, self.chunk_size):
                yield TextDelta(piece)
            return
        for position, piece in enumerate(_pieces(json.dumps(answer.arguments), self.chunk_size)):
            if position == 0:
                yield ToolCallDelta(0, answer.id, answer.name, piece)
            else:
                yield ToolCallDelta(0, None, None, piece)


def _answer(request: ModelRequest) -> TextBlock | ToolCallBlock:
    """The scripted answer to ``request``: a text, or the one tool call to make."""
    last = request.messages[-1] if request.messages else None
    if isinstance(last, ToolMessage):
        follow_up = _next_file_call(request, last)
        return follow_up if follow_up is not None else TextBlock(_summary(last))
    prompt = _text_of(last) if isinstance(last, UserRoleMessage) else ""
    if prompt.startswith(_TOOL):
        return _tool_call(request, prompt[len(_TOOL) :].strip())
    for prefix, background in ((_FOREGROUND, False), (_BACKGROUND, True)):
        if prompt.startswith(prefix):
            return _shell_call(request, prompt[len(prefix) :].strip(), background=background)
    directive = _file_directive(prompt)
    if directive is not None:
        tool, arguments = directive
        if tool == "edit":
            tool, arguments = "read", {"path": arguments["path"]}
        return _offered_call(request, tool, arguments)
    return TextBlock(_reply(prompt))


_READ = re.compile(r"read (\S+)\Z")
_WRITE = re.compile(r"write (\S+?): (.*)\Z", re.DOTALL)
_EDIT = re.compile(r"edit (\S+?): (.+?) => (.*)\Z", re.DOTALL)
_GREP = re.compile(r"grep (.+?)(?: in (\S+))?\Z")
_GLOB = re.compile(r"glob (\S+)\Z")


def _file_directive(prompt: str) -> tuple[str, dict[str, object]] | None:
    """The file tool a prompt names, and its arguments (see the module docs)."""
    text = prompt.strip()
    if match := _READ.match(text):
        return "read", {"path": match.group(1)}
    if match := _WRITE.match(text):
        return "write", {"path": match.group(1), "content": match.group(2) + "\n"}
    if match := _EDIT.match(text):
        path, old, new = match.groups()
        return "edit", {"path": path, "old_string": old, "new_string": new}
    if match := _GREP.match(text):
        arguments: dict[str, object] = {"pattern": match.group(1), "output_mode": "content"}
        if match.group(2):
            arguments["path"] = match.group(2)
        return "grep", arguments
    if match := _GLOB.match(text):
        return "glob", {"pattern": match.group(1)}
    return None


def _next_file_call(request: ModelRequest, result: ToolMessage) -> ToolCallBlock | None:
    """The edit that follows the successful read of an ``edit`` directive, if this is one."""
    if result.name != "read" or result.is_error:
        return None
    prompt = next(
        (_text_of(m) for m in reversed(request.messages) if isinstance(m, UserRoleMessage)), ""
    )
    directive = _file_directive(prompt)
    if directive is None or directive[0] != "edit":
        return None
    if request.tool("edit") is None:
        return None
    return ToolCallBlock(_call_id(request), "edit", directive[1])


def _offered_call(
    request: ModelRequest, tool: str, arguments: dict[str, object]
) -> TextBlock | ToolCallBlock:
    if request.tool(tool) is None:
        return TextBlock(
            f"I cannot call {tool}: the tool is not available to this agent. "
            "(This is the offline model: a script, not an LLM.)"
        )
    return ToolCallBlock(_call_id(request), tool, arguments)


def _tool_call(request: ModelRequest, spec: str) -> TextBlock | ToolCallBlock:
    name, _, raw = spec.partition(" ")
    if not name:
        return TextBlock('Name a tool after /tool, e.g. `/tool bash {"command": "ls"}`.')
    if request.tool(name) is None:
        offered = ", ".join(sorted(tool.name for tool in request.tools)) or "none"
        return TextBlock(f"There is no tool {name!r} here; the tools offered are: {offered}.")
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return TextBlock(
            f"The arguments for {name!r} are not JSON ({exc.msg}); nothing was called."
        )
    if not isinstance(arguments, dict):
        return TextBlock(f"The arguments for {name!r} must be a JSON object; nothing was called.")
    return ToolCallBlock(_call_id(request), name, arguments)


def _call_id(request: ModelRequest) -> str:
    # The conversation only grows, so its length is unique within it, and the
    # same for the same conversation.
    return f"offline-call-{len(request.messages)}"


def _shell_call(
    request: ModelRequest, command: str, *, background: bool
) -> TextBlock | ToolCallBlock:
    if not command:
        return TextBlock("Nothing to run: write a shell command after the prefix, e.g. `$ ls`.")
    if request.tool(BASH_TOOL) is None:
        return TextBlock(
            f"I cannot run `{command}`: the {BASH_TOOL} tool is not available to this agent. "
            "(This is the offline model: a script, not an LLM.)"
        )
    arguments: dict[str, object] = {"command": command}
    if background:
        arguments["run_in_background"] = True
    return ToolCallBlock(_call_id(request), BASH_TOOL, arguments)


def _summary(result: ToolMessage) -> str:
    summary = _text_summary(result)
    for image in result.images:
        summary += f"\n(I was shown an image: {image.mime_type or 'of an unknown type'})"
    return summary


def _text_summary(result: ToolMessage) -> str:
    outcome = "failed" if result.is_error else "finished"
    output = result.content.strip()
    if not output:
        return f"The {result.name} call {outcome} with no output."
    lines = output.splitlines()
    excerpt = "\n".join(lines[:_SUMMARY_LINES])
    if len(excerpt) > _SUMMARY_CHARS:
        excerpt = excerpt[:_SUMMARY_CHARS].rstrip() + " …"
    elif len(lines) > _SUMMARY_LINES:
        excerpt += f"\n… ({len(lines) - _SUMMARY_LINES} more lines)"
    summary = f"The {result.name} call {outcome}:\n{excerpt}"
    exit_code = _EXIT_CODE.search(output)
    if exit_code is not None and exit_code.group(0) not in excerpt:
        summary += f"\n(exit code {exit_code.group(1)})"
    return summary


def _reply(prompt: str) -> str:
    if not prompt.strip():
        opening = (
            "This is the offline model, a script and not an LLM; there is no prompt to answer."
        )
    else:
        opening = (
            f'This is the offline model, a script and not an LLM. You said: "{_echo(prompt)}".'
        )
    return (
        f"{opening}\n"
        f'Start a prompt with "{_FOREGROUND}" to run a shell command, or with '
        f'"{_BACKGROUND}" to run it in the background; "read PATH", "write PATH: TEXT", '
        '"edit PATH: OLD => NEW", "grep PATTERN" and "glob PATTERN" use the file tools.\n'
        f"{CONFIGURE_HINT}"
    )


def _echo(prompt: str) -> str:
    """``prompt``'s words joined by single spaces, cut after `_ECHO_CHARS`.

    Only the words the echo shows are taken: a long prompt (a compaction's
    transcript) is not split whole into a string per word.
    """
    words: list[str] = []
    length = -1
    for match in _WORD.finditer(prompt):
        words.append(match.group())
        length += 1 + len(words[-1])
        if length > _ECHO_CHARS:
            break
    echo = " ".join(words)
    if len(echo) > _ECHO_CHARS:
        echo = echo[:_ECHO_CHARS].rstrip() + " …"
    return echo


def _word_count(text: str) -> int:
    """``len(text.split())``, without a string per word."""
    return sum(1 for _ in _WORD.finditer(text))


def _text_of(message: Message | None) -> str:
    if isinstance(message, SystemMessage):
        return message.text
    if isinstance(message, UserRoleMessage | AssistantMessage):
        return "\n".join(block.text for block in message.content if isinstance(block, TextBlock))
    if isinstance(message, ToolMessage):
        return message.content
    return ""


def _words_in(request: ModelRequest) -> int:
    """Input "tokens": the words of the system prompt and of the message answered.

    A real model reads the whole history; this script reads only its last
    message, and counting what it did not read would make every request cost
    as much as the conversation is long.
    """
    last = request.messages[-1] if request.messages else None
    return _word_count(request.system or "") + _word_count(_text_of(last))


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


name = "offline"
inject = ("llm",)


class Config(Schema, frozen=True):
    """Configuration of the ``offline`` provider."""

    chunk_size: Annotated[int, Meta(ge=1)] = 8
    """Characters per streamed piece."""


async def apply(ctx: Context, config: Config) -> None:
    """Register the ``offline`` provider for as long as this plugin is loaded."""
    llm = ctx.service(LLM)
    await llm.register(PROVIDER, OfflineModel(chunk_size=config.chunk_size))
