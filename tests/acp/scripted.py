"""A test plugin for ``tether acp``: a scripted model, a ``bash`` tool, and a busy trigger.

The ``scripted`` model answers from the conversation's last message:

* a tool result: ``done: <first line of the output>``;
* ``hold``: streams ``holding``, then waits for the cancel;
* ``bash <command>``: calls the ``bash`` tool with ``<command>``;
* ``bg <command>``: the same, with ``run_in_background`` (for the real ``bash`` tool);
* ``call <tool> <json>``: calls ``<tool>`` with the JSON arguments (the file tools);
* ``fail``: the request fails with ``the model is unavailable``;
* ``think <text>``: reasons ``pondering <text>``, then answers ``echo: <text>``;
* ``long``: stops at its output token limit;
* ``decline``: starts an answer, then the provider refuses (a ``refusal`` finish);
* ``forever``: calls ``bash true`` at every step, never answering;
* ``which model``: answers ``model: <the request's model>``;
* ``how many``: answers ``messages: <messages in the request>``;
* ``plan``: calls ``todo`` with two tasks (then answers ``done: …``);
* a request for a session's title (its system prompt asks to name a
  conversation): ``"Scripted: <the prompt's first 20 characters>."``;
* anything else: ``echo: <text>``, streamed in three pieces, with usage
  figures (input: 10 per message of the request, 4 of them cached; output:
  the answer's words, 1 of them reasoning).

The plugin also registers the slash command ``/shout <text>`` (answers the
text in capitals).

A prompt containing ``forbidden`` is vetoed by the pre-step hook (the turn
ends ``blocked``).

The ``bash`` tool (registered unless another plugin brings one) runs the
command with ``/bin/sh`` in the session's cwd, in a process group of its own
inside the server's session, and kills the group when the call is cancelled.

An agent whose cwd's name starts with ``busy`` gets the plugin prompt
``hold`` as soon as it is published, so prompts sent to it wait in its inbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal as signals
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from tether.agent import Agent, UserMessage
from tether.agent.commands import COMMANDS, Command, CommandCall, CommandError
from tether.agent.events import AGENT_CREATED
from tether.content import TextBlock, ToolMessage, UserRoleMessage
from tether.llm.chunks import (
    Finish,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tether.llm.request import ModelRequest
from tether.loop.hooks import PRE_STEP
from tether.plugins.tool_bash import BASH_SHOWN
from tether.runtime import CancelSignal, Context, Veto
from tether.tools import Tool, ToolExec, ToolOutput

name = "scripted"
inject = ("llm", "tools")


class ScriptedModel:
    name = "scripted"

    def __init__(self) -> None:
        self._failed: set[int] = set()
        """Lengths of conversations whose ``flaky`` request already failed once."""

    def _flaky(self, request: ModelRequest) -> list[StreamChunk]:
        """Fails mid-stream once; the retry then streams the whole answer."""
        if len(request.messages) not in self._failed:
            self._failed.add(len(request.messages))
            failed = Finish("error", error="529 overloaded", error_code="server")
            return [TextDelta("Hello"), failed]
        return [TextDelta("Hello, "), TextDelta("world!"), Finish("stop")]

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        last = request.messages[-1]
        if _prompt_of(request) == "flaky":
            for chunk in self._flaky(request):
                yield chunk
            return
        if _prompt_of(request) == "forever":
            yield ToolCallDelta(index=0, id="call-f", name="bash", args_delta='{"command": "true"}')
            yield Finish("tool-calls")
            return
        if isinstance(last, ToolMessage):
            first = last.content.splitlines()[0] if last.content else ""
            yield TextDelta(f"done: {first}")
            yield Finish("stop")
            return
        text = ""
        if isinstance(last, UserRoleMessage):
            text = "\n".join(b.text for b in last.content if isinstance(b, TextBlock))
        if text == "hold":
            yield TextDelta("holding")
            await signal.wait()
            yield Finish("aborted")
        elif text.startswith("bash ") or text.startswith("bg "):
            background = text.startswith("bg ")
            command = text.partition(" ")[2]
            arguments = json.dumps(
                {"command": command, "run_in_background": True}
                if background
                else {"command": command}
            )
            yield ToolCallDelta(index=0, id="call-1", name="bash", args_delta=arguments)
            yield Finish("tool-calls")
        elif text.startswith("call "):
            tool, _, arguments = text[len("call ") :].partition(" ")
            yield ToolCallDelta(index=0, id="call-1", name=tool, args_delta=arguments or "{}")
            yield Finish("tool-calls")
        elif text == "fail":
            yield Finish("error", error="the model is unavailable", error_code="bad-request")
        elif text == "long":
            yield TextDelta("and so on, and so on")
            yield Finish("max-tokens")
        elif text == "decline":
            yield TextDelta("I can")
            yield Finish("refusal")
        elif (answered := _about_the_request(text, request)) is not None:
            for chunk in answered:
                yield chunk
        else:
            if text.startswith("think "):
                text = text[len("think ") :]
                yield ReasoningDelta(f"pondering {text}")
            answer = f"echo: {text}"
            third = max(1, len(answer) // 3)
            for start in range(0, len(answer), third):
                yield TextDelta(answer[start : start + third])
            yield Usage(
                input_tokens=10 * len(request.messages),
                output_tokens=len(answer.split()),
                reasoning_tokens=1,
                cached_tokens=4,
            )
            yield Finish("stop")


def _about_the_request(text: str, request: ModelRequest) -> list[StreamChunk] | None:
    """The answers to ``which model``, ``how many``, ``plan`` and to a request for a
    session's title; ``None`` for other text."""
    if request.system and request.system.startswith("You name conversations"):
        return [TextDelta(f'"Scripted: {text[:20]}."\nmore'), Finish("stop")]
    if text == "which model":
        return [TextDelta(f"model: {request.model}"), Finish("stop")]
    if text == "how many":
        return [TextDelta(f"messages: {len(request.messages)}"), Finish("stop")]
    if text == "plan":
        tasks = [
            {"content": "read the code", "status": "completed", "priority": "high"},
            {"content": "write the fix", "status": "in_progress"},
        ]
        arguments = json.dumps({"tasks": tasks})
        return [
            ToolCallDelta(index=0, id="call-p", name="todo", args_delta=arguments),
            Finish("tool-calls"),
        ]
    return None


def _prompt_of(request: ModelRequest) -> str:
    """The text of the conversation's last user message."""
    for message in reversed(request.messages):
        if isinstance(message, UserRoleMessage):
            return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
    return ""


class BashArgs(BaseModel):
    command: str


async def bash(args: BashArgs, exec: ToolExec) -> ToolOutput:
    process = await asyncio.create_subprocess_shell(
        args.command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=exec.cwd,
        process_group=0,
    )
    output = asyncio.ensure_future(process.communicate())
    stopped = asyncio.ensure_future(exec.signal.wait())
    try:
        await asyncio.wait({output, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not output.done():
            os.killpg(process.pid, signals.SIGKILL)
        stdout, _ = await output
    text = stdout.decode(errors="replace")
    if exec.signal.cancelled:
        return ToolOutput(f"{text}killed", is_error=True)
    return ToolOutput(f"{text}exit code {process.returncode}", is_error=process.returncode != 0)


def busy(agent: Agent) -> None:
    if os.path.basename(agent.session.header.cwd).startswith("busy"):
        agent.followup(UserMessage.text("hold", source="plugin"))


async def no_forbidden(
    value: tuple[UserMessage, ...], next_: Any, agent: Agent, step: int
) -> tuple[UserMessage, ...]:
    if any("forbidden" in message.plain_text for message in value):
        raise Veto("forbidden words")
    return await next_(value)  # type: ignore[no-any-return]


async def shout(call: CommandCall) -> str:
    if not call.argument:
        raise CommandError("/shout needs some text")
    return call.argument.upper()


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("scripted", ScriptedModel())
    commands = ctx.get(COMMANDS)
    if commands is not None:
        await commands.register(Command("shout", "Say it louder", shout, hint="text"))
    if ctx.tools.get("bash") is None:
        await ctx.tools.register(
            Tool(
                name="bash",
                description="Run a command.",
                args=BashArgs,
                execute=bash,
                # Shown as the real bash is: titled by its command.
                shown=BASH_SHOWN,
            )
        )
    ctx.on(AGENT_CREATED, busy)
    ctx.on(PRE_STEP, no_forbidden)
