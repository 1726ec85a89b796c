"""A cancel over ACP: every open tool call is reported failed ("cancelled") before the answer."""

import asyncio
import json
from pathlib import Path

from tests.acp.harness import serving
from tests.acp.test_orphans import REAL_BASH
from tests.shell.support import Gate, alive


async def test_every_open_tool_call_is_failed_as_cancelled_before_the_prompt_answers(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "gate")
    async with serving(tmp_path, overlay=REAL_BASH) as server:
        sid = await server.new_session(tmp_path)  # the gate is in its workspace
        line = asyncio.ensure_future(gate.line())
        prompt = {
            "jsonrpc": "2.0",
            "id": "held",
            "method": "session/prompt",
            "params": {
                "sessionId": sid,
                "prompt": [{"type": "text", "text": f"bash echo $$ > {gate}; exec sleep 30"}],
            },
        }
        server.write_raw(json.dumps(prompt).encode() + b"\n")
        pid = int(await line)
        await server.conn.cancel(session_id=sid)
        answer = await server.frame(lambda f: f.get("id") == "held" and "result" in f)
        assert answer["result"] == {"stopReason": "cancelled"}
        assert not alive(pid)
        before = server.frames[: server.frames.index(answer)]
        updates = [
            f["params"]["update"]
            for f in before
            if f.get("method") == "session/update"
            and f["params"]["update"].get("sessionUpdate") == "tool_call_update"
        ]
        failed = [u for u in updates if u.get("status") == "failed"]
        assert failed, updates
        assert "cancelled" in json.dumps(failed[-1].get("content"))
        await server.close_stdin()
        [receipt] = [e["data"] for e in server.log(sid) if e["type"] == "tool/stopped"]
        assert receipt["stopped"][0]["pgid"] == pid
