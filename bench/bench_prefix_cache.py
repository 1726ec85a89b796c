"""How much of each request a server's prompt cache serves, over a session a person resumes.

Usage: python bench/bench_prefix_cache.py [--vs SRC] [--anthropic]

A local server (llama.cpp's ``llama-server``) keeps the last prompt of its
slot and processes again only what follows the prefix the next prompt
shares with it; hosted providers cache prefixes the same way. This runs one
session as a person does, each command a ``tether run`` process against a
fake OpenAI-compatible server on 127.0.0.1 whose usage figures come from
that accounting:

1. ``run``: the model reads ``app.py`` and answers;
2. the person edits ``app.py`` and runs ``git init``;
3. ``run --continue``: the model reads ``app.py`` again, edits it, answers;
4. ``run --continue``: the model runs ``git status`` and answers.

Then two sessions in two directories, one after the other on the same
server (each ``run``: the model reads ``app.py`` and answers): what the
second session's first request is served from the cache the first one left
(the system prompt and the tool definitions, when nothing in them names
the directory).

The fake renders each request as a chat template does (the system prompt,
the tool definitions, then each message), counts four characters a token,
and reports the tokens of the prefix it shares with the previous request as
cached (``prompt_tokens_details.cached_tokens``). With ``--anthropic`` the
session runs on the Messages API, and the fake caches as Anthropic does:
the prefix up to each ``cache_control`` breakpoint of a request is kept,
and a later request is served from the longest kept prefix it begins with
(``cache_read_input_tokens``). It prints each request's prompt and cached
tokens and the share served from the cache from the second request on (the
goal: 90% or more). ``--vs SRC`` (the ``src`` directory of another
checkout) runs the same session on that tree too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.adapters.fake_server import FakeServer, Recorded, Reply, Script  # noqa: E402
from tests.adapters.support import (  # noqa: E402
    block_delta,
    block_start,
    block_stop,
    call,
    delta,
    message_end,
    message_start,
)

CHARS_PER_TOKEN = 4
ANTHROPIC_KEY = "sk-ant-bench-0123456789"


class PromptCache:
    """A server's prompt cache, and the (prompt, cached) tokens of every request.

    ``breakpoints=False``: one slot, as llama.cpp's server: the last prompt is
    kept, and a request is served from it up to the prefix they share.
    ``breakpoints=True``: as Anthropic's: the prefix up to each block marked
    ``cache_control`` is kept, and a request is served from the longest kept
    prefix it begins with.
    """

    def __init__(self, *, breakpoints: bool) -> None:
        self.breakpoints = breakpoints
        self.kept: list[str] = []
        self.figures: list[tuple[int, int]] = []

    def account(self, pieces: list[tuple[str, bool]]) -> tuple[int, int]:
        """The prompt and cached tokens of a request rendered as ``pieces`` (each
        piece's text, and whether a cache breakpoint follows it)."""
        prompt = "".join(text for text, _ in pieces)
        if self.breakpoints:
            cached = max((len(kept) for kept in self.kept if prompt.startswith(kept)), default=0)
            end = 0
            for text, marked in pieces:
                end += len(text)
                if marked:
                    self.kept.append(prompt[:end])
        else:
            last = self.kept[-1] if self.kept else ""
            cached = _shared(last, prompt)
            self.kept = [prompt]
        figures = (len(prompt) // CHARS_PER_TOKEN, cached // CHARS_PER_TOKEN)
        self.figures.append(figures)
        return figures


def _shared(first: str, second: str) -> int:
    """The length of the prefix ``first`` and ``second`` share."""
    size = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        size += 1
    return size


def chat_pieces(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """A Chat Completions request as a chat template renders it: system, tools, messages."""
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    rest = messages[1:] if system else messages
    pieces = [(f"<system>{system}", False), (f"<tools>{json.dumps(body.get('tools', []))}", False)]
    pieces.extend((f"<{m['role']}>{json.dumps(m, sort_keys=True)}", False) for m in rest)
    return pieces


def messages_pieces(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """A Messages API request in the order the API caches it: tools, system, messages,
    block by block, with its ``cache_control`` breakpoints."""

    def piece(block: object) -> tuple[str, bool]:
        if not isinstance(block, dict):
            return json.dumps(block), False
        marked = "cache_control" in block
        plain = {key: value for key, value in block.items() if key != "cache_control"}
        return json.dumps(plain, sort_keys=True), marked

    pieces = [(json.dumps(body.get("tools", []), sort_keys=True), False)]
    system = body.get("system", [])
    pieces.extend(piece(block) for block in (system if isinstance(system, list) else [system]))
    for message in body["messages"]:
        pieces.append((f"<{message['role']}>", False))
        pieces.extend(piece(block) for block in message["content"])
    return pieces


def chat_answer(cache: PromptCache, events: Sequence[object]) -> Script:
    """Stream ``events`` (a Chat Completions answer without its usage), then usage."""

    async def script(request: Recorded, reply: Reply) -> None:
        prompt, cached = cache.account(chat_pieces(request.json))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        await reply.start()
        for event in [*events, {"choices": [], "usage": usage}, "[DONE]"]:
            await reply.event(event)
        await reply.end()

    return script


def messages_answer(cache: PromptCache, blocks: Sequence[dict[str, Any]], stop: str) -> Script:
    """Stream a Messages API answer of ``blocks``, its usage from ``cache``."""

    async def script(request: Recorded, reply: Reply) -> None:
        prompt, cached = cache.account(messages_pieces(request.json))
        usage = {"input_tokens": prompt - cached, "cache_read_input_tokens": cached}
        events = [message_start(**usage)]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(block_start(index, {"type": "text", "text": ""}))
                events.append(block_delta(index, {"type": "text_delta", "text": block["text"]}))
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                events.append(block_start(index, start))
                partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                events.append(block_delta(index, partial))
            events.append(block_stop(index))
        events.extend(message_end(stop))
        await reply.start()
        for name, data in events:
            await reply.event(data, event=name)
        await reply.end()

    return script


class Wire:
    """One wire format: the model to ask, and the fake's answers."""

    def __init__(self, anthropic: bool) -> None:
        self.anthropic = anthropic
        self.cache = PromptCache(breakpoints=anthropic)

    def model(self, server: FakeServer) -> tuple[str, ...]:
        model = "anthropic:claude-bench" if self.anthropic else "openai-compatible:local"
        return ("--model", model, "--base-url", f"{server.url}/v1")

    def text(self, words: str) -> Script:
        if self.anthropic:
            return messages_answer(self.cache, [{"type": "text", "text": words}], "end_turn")
        return chat_answer(self.cache, [delta(words), delta(finish="stop")])

    def tool(self, name: str, arguments: dict[str, object]) -> Script:
        call_id = f"call_{os.urandom(4).hex()}"
        if self.anthropic:
            block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
            return messages_answer(self.cache, [block], "tool_use")
        fragment = call(0, json.dumps(arguments), id=call_id, name=name)
        return chat_answer(self.cache, [delta(calls=[fragment]), delta(finish="tool_calls")])


def tether(src: Path, home: Path, *args: str) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and key not in ("TETHER_MODEL", "TETHER_BASE_URL")
    }
    env |= {"TETHER_HOME": str(home / ".tether"), "PYTHONPATH": str(src)}
    env["ANTHROPIC_API_KEY"] = ANTHROPIC_KEY
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"tether run failed ({done.returncode}):\n{done.stderr}")


async def session(src: Path, *, anthropic: bool) -> list[tuple[int, int]]:
    """Run the session on the tree ``src``; each request's (prompt, cached) tokens."""
    wire = Wire(anthropic)
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        app = home / "app.py"
        app.write_text('def main():\n    print("hello")\n\n\nmain()\n')
        async with FakeServer() as server:
            server.queue(wire.tool("read", {"path": "app.py"}), wire.text("It prints hello."))
            first = (*wire.model(server), "What does app.py do?")
            await asyncio.to_thread(tether, src, home, *first)
            app.write_text(app.read_text().replace("hello", "hello, world"))
            await asyncio.to_thread(subprocess.run, ["git", "init", "-q"], cwd=home, check=True)
            edit = {"path": "app.py", "old_string": "def main():", "new_string": "def main():\n"}
            edit["new_string"] += '    """Greet."""'
            server.queue(
                wire.tool("read", {"path": "app.py"}),
                wire.tool("edit", edit),
                wire.text("main has a docstring now."),
            )
            await asyncio.to_thread(tether, src, home, "--continue", "Give main a docstring.")
            server.queue(
                wire.tool("bash", {"command": "git status --short"}),
                wire.text("app.py is untracked."),
            )
            await asyncio.to_thread(tether, src, home, "--continue", "What does git say?")
    return wire.cache.figures


async def two_directories(src: Path, *, anthropic: bool) -> list[tuple[int, int]]:
    """A session in one directory, then one in another, on the tree ``src``; each
    request's (prompt, cached) tokens."""
    wire = Wire(anthropic)
    with tempfile.TemporaryDirectory() as scratch:
        async with FakeServer() as server:
            for name in ("first-project", "second-project"):
                home = Path(scratch) / name
                home.mkdir()
                (home / "app.py").write_text(f'def main():\n    print("{name}")\n')
                server.queue(wire.tool("read", {"path": "app.py"}), wire.text("It prints."))
                await asyncio.to_thread(tether, src, home, *wire.model(server), "What is app.py?")
    return wire.cache.figures


def report(label: str, figures: list[tuple[int, int]]) -> None:
    print(f"{label}:")
    for number, (prompt, cached) in enumerate(figures, 1):
        share = cached / prompt
        print(f"  request {number}: {prompt:6,} prompt tokens, {cached:6,} cached ({share:.0%})")
    later = figures[1:]
    prompt = sum(p for p, _ in later)
    cached = sum(c for _, c in later)
    share = cached / prompt
    print(
        f"  from the second request on: {cached:,} of {prompt:,} prompt tokens cached ({share:.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", type=Path, help="the src directory of another checkout")
    parser.add_argument(
        "--anthropic", action="store_true", help="the Messages API and its cache breakpoints"
    )
    args = parser.parse_args()
    trees = [("this tree", ROOT / "src")]
    if args.vs is not None:
        trees.append((str(args.vs), args.vs.resolve()))
    for label, src in trees:
        report(label, asyncio.run(session(src, anthropic=args.anthropic)))
    for label, src in trees:
        figures = asyncio.run(two_directories(src, anthropic=args.anthropic))
        prompt, cached = figures[2]
        print(
            f"{label}, two sessions in two directories: the second session's first request: "
            f"{cached:,} of {prompt:,} prompt tokens cached ({cached / prompt:.0%})"
        )


if __name__ == "__main__":
    main()
