"""``tether acp`` never imports the ACP SDK (``acp``): it speaks ACP through its generated
wire types, so an editor's first session does not wait for the SDK's ~270 models.

The server runs under ``python -X importtime``, which lists every module imported on
stderr; it is driven with raw frames through ``initialize``, ``session/new`` and a
prompt, then its input is closed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.acp.harness import ROOT, SCRIPTED, env_for


async def _answer(stdout: asyncio.StreamReader, frame_id: int) -> dict[str, Any]:
    while True:
        line = await stdout.readline()
        assert line, "the server closed its output"
        frame = json.loads(line)
        if frame.get("id") == frame_id and "method" not in frame:
            return frame  # type: ignore[no-any-return]


def _imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` reported."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


async def test_tether_acp_serves_a_session_and_a_prompt_without_importing_the_sdk(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(SCRIPTED.format(ledger=json.dumps(str(tmp_path / "ledger.txt"))))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "tether.cli.main",
        "--config",
        str(overlay),
        "acp",
        "--model",
        "scripted",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(home),
        cwd=str(ROOT),
    )
    assert process.stdin is not None and process.stdout is not None
    requests = [
        ("initialize", {"protocolVersion": 1}),
        ("session/new", {"cwd": str(home), "mcpServers": []}),
    ]
    answers = []
    for frame_id, (method, params) in enumerate(requests):
        frame = {"jsonrpc": "2.0", "id": frame_id, "method": method, "params": params}
        process.stdin.write(json.dumps(frame).encode() + b"\n")
        answers.append(await _answer(process.stdout, frame_id))
    session = answers[1]["result"]["sessionId"]
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}
    process.stdin.write(
        json.dumps(
            {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt}
        ).encode()
        + b"\n"
    )
    assert (await _answer(process.stdout, 2))["result"] == {"stopReason": "end_turn"}
    process.stdin.close()
    _, stderr = await process.communicate()
    assert process.returncode == 0
    imported = _imported(stderr.decode())
    assert "tether.acp.server" in imported and "tether.acp.wire" in imported
    assert sorted(name for name in imported if name == "acp" or name.startswith("acp.")) == []
