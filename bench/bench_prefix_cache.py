"""How much of each request a server's prompt cache serves, over a session a person resumes.

Usage: python bench/bench_prefix_cache.py [--vs SRC]

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

The fake renders each request as a chat template does (the system prompt,
the tool definitions, then each message), counts four characters a token,
and reports the tokens of the prefix it shares with the previous request as
cached (``prompt_tokens_details.cached_tokens``). It prints each request's
prompt and cached tokens and the share served from the cache from the
second request on (the goal: 90% or more). ``--vs SRC`` (the ``src``
directory of another checkout) runs the same session on that tree too.
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
from tests.adapters.support import call, delta  # noqa: E402

CHARS_PER_TOKEN = 4


class PromptCache:
    """One slot's cache: the last prompt, and the figures of every request."""

    def __init__(self) -> None:
        self.last = ""
        self.figures: list[tuple[int, int]] = []

    def account(self, body: dict[str, Any]) -> tuple[int, int]:
        """The prompt and cached tokens of a request with ``body``."""
        prompt = render(body)
        shared = 0
        for a, b in zip(self.last, prompt, strict=False):
            if a != b:
                break
            shared += 1
        self.last = prompt
        figures = (len(prompt) // CHARS_PER_TOKEN, shared // CHARS_PER_TOKEN)
        self.figures.append(figures)
        return figures


def render(body: dict[str, Any]) -> str:
    """The prompt a chat template makes of ``body``: system, tools, then the messages."""
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    rest = messages[1:] if system else messages
    parts = [f"<system>{system}", f"<tools>{json.dumps(body.get('tools', []))}"]
    parts.extend(f"<{m['role']}>{json.dumps(m, sort_keys=True)}" for m in rest)
    return "".join(parts)


def answer(cache: PromptCache, events: Sequence[object]) -> Script:
    """Stream ``events`` (an answer without its usage), then usage from ``cache``."""

    async def script(request: Recorded, reply: Reply) -> None:
        prompt, cached = cache.account(request.json)
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


def text(words: str) -> list[object]:
    return [delta(words), delta(finish="stop")]


def tool(name: str, arguments: dict[str, object]) -> list[object]:
    fragment = call(0, json.dumps(arguments), id=f"call_{os.urandom(4).hex()}", name=name)
    return [delta(calls=[fragment]), delta(finish="tool_calls")]


def tether(src: Path, home: Path, *args: str) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and key not in ("TETHER_MODEL", "TETHER_BASE_URL")
    }
    env |= {"TETHER_HOME": str(home / ".tether"), "PYTHONPATH": str(src)}
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


async def session(src: Path) -> list[tuple[int, int]]:
    """Run the session on the tree ``src``; each request's (prompt, cached) tokens."""
    cache = PromptCache()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        app = home / "app.py"
        app.write_text('def main():\n    print("hello")\n\n\nmain()\n')
        async with FakeServer() as server:
            model = ("--model", "openai-compatible:local", "--base-url", f"{server.url}/v1")
            server.queue(
                answer(cache, tool("read", {"path": "app.py"})),
                answer(cache, text("app.py prints hello.")),
            )
            await asyncio.to_thread(tether, src, home, *model, "What does app.py do?")
            app.write_text(app.read_text().replace("hello", "hello, world"))
            await asyncio.to_thread(subprocess.run, ["git", "init", "-q"], cwd=home, check=True)
            edit = {"path": "app.py", "old_string": "def main():", "new_string": "def main():\n"}
            edit["new_string"] += '    """Greet."""'
            server.queue(
                answer(cache, tool("read", {"path": "app.py"})),
                answer(cache, tool("edit", edit)),
                answer(cache, text("main has a docstring now.")),
            )
            await asyncio.to_thread(tether, src, home, "--continue", "Give main a docstring.")
            server.queue(
                answer(cache, tool("bash", {"command": "git status --short"})),
                answer(cache, text("app.py is untracked.")),
            )
            await asyncio.to_thread(tether, src, home, "--continue", "What does git say?")
    return cache.figures


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
    args = parser.parse_args()
    report("this tree", asyncio.run(session(ROOT / "src")))
    if args.vs is not None:
        report(str(args.vs), asyncio.run(session(args.vs.resolve())))


if __name__ == "__main__":
    main()
