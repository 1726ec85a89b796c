"""A session on a local model, as a user runs it: ``tether run`` and ``run --continue``.

Each test runs ``tether`` as a subprocess against a fake OpenAI-compatible
server on 127.0.0.1 (a local server's base URL).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import call, delta, text_answer, usage
from tests.cli.test_commands import session_id
from tests.cli.test_session_model import tether


def model(server: FakeServer) -> tuple[str, ...]:
    return ("--model", "openai-compatible:local", "--base-url", f"{server.url}/v1")


def tool_call(name: str, arguments: dict[str, object]) -> list[object]:
    """A streamed answer that calls one tool."""
    return [
        delta(calls=[call(0, json.dumps(arguments), id=f"call_{name}", name=name)]),
        delta(finish="tool_calls"),
        usage(5, 5),
        "[DONE]",
    ]


def shared_prefix(first: bytes, second: bytes) -> int:
    size = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        size += 1
    return size


def events_of(home: Path, sid: str, kind: str) -> list[dict[str, object]]:
    lines = (home / "sessions" / f"{sid}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [record["data"] for record in records if record.get("type") == kind]


async def test_a_file_read_before_a_resume_can_be_edited_after_it(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    async with FakeServer() as server:
        server.queue(
            stream(tool_call("read", {"path": "notes.txt"})),
            stream(text_answer("I read it.")),
            stream(
                tool_call(
                    "edit", {"path": "notes.txt", "old_string": "alpha", "new_string": "beta"}
                )
            ),
            stream(text_answer("Edited.")),
        )
        status, _, err = await tether(tmp_path, "run", *model(server), "read notes.txt")
        assert status == 0, err
        sid = session_id(err)
        status, _, err = await tether(tmp_path, "run", "--continue", "now change alpha to beta")
    assert status == 0, err
    assert (tmp_path / "notes.txt").read_text() == "beta\n"
    results = events_of(tmp_path, sid, "tool/result")
    assert [(r["name"], r["is_error"]) for r in results] == [("read", False), ("edit", False)]


async def test_a_resumed_session_shares_its_request_prefix_after_an_edit_and_git_init(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text("print('one')\n")
    async with FakeServer() as server:
        server.queue(stream(text_answer("Hello.")), stream(text_answer("Again.")))
        status, _, err = await tether(tmp_path, "run", *model(server), "hello")
        assert status == 0, err
        (tmp_path / "app.py").write_text("print('two')\n")
        await asyncio.to_thread(subprocess.run, ["git", "init", "-q"], cwd=tmp_path, check=True)
        status, _, err = await tether(tmp_path, "run", "--continue", "again")
    assert status == 0, err

    first, second = (request.body for request in server.requests)
    share = shared_prefix(first, second) / len(second)
    assert share >= 0.9, f"only {share:.0%} of the second request repeats the first"
    # The first request, but for its closing brackets, begins the second.
    assert shared_prefix(first, second) >= len(first) - 2
    notes = [
        m for m in json.loads(second)["messages"] if m["content"].startswith("Environment now:")
    ]
    assert "not a git repository" in notes[0]["content"]
    assert "a git repository rooted at" in notes[1]["content"]


async def test_a_prompt_the_server_cut_is_said_in_the_terminal(tmp_path: Path) -> None:
    long = "Consider this line with care. " * 1_000  # about 7,500 tokens
    async with FakeServer() as server:
        server.queue(stream([*text_answer("Fine.")[:-2], usage(2_048, 2), "[DONE]"]))
        status, _, err = await tether(tmp_path, "run", *model(server), long)
    assert status == 0, err
    assert "it dropped the front of the conversation" in err
    assert "--no-context-shift" in err


async def test_a_call_a_local_model_writes_as_text_is_shown_and_run_as_a_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    written = '<tool_call>\n{"name": "read", "arguments": {"path": "notes.txt"}}\n</tool_call>'
    async with FakeServer() as server:
        server.queue(
            stream([delta(written), delta(finish="stop"), usage(5, 5), "[DONE]"]),
            stream(text_answer("It says alpha.")),
        )
        status, out, err = await tether(tmp_path, "run", *model(server), "what is in notes.txt?")
    assert status == 0, err
    assert "→ read notes.txt" in err
    assert "tool_call" not in out + err
    assert "It says alpha." in out
    sid = session_id(err)
    [result] = events_of(tmp_path, sid, "tool/result")
    assert result["is_error"] is False and "alpha" in str(result["content"])
