"""The spend budget in an editor: the ``budget_usd`` config option and the stop reason.

``tether acp`` runs as a subprocess with the scripted model and a priced
catalog (:data:`tests.acp.test_editor_features.CATALOG`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from tests.acp.harness import serving
from tests.acp.test_editor_features import CATALOG
from tests.cli.test_commands import env_for


async def test_the_budget_option_stops_the_next_request_and_the_prompt_says_so(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        options = {option.id: option for option in created.config_options or []}
        assert options["budget_usd"].current_value == "off"
        assert await server.prompt(sid, "hello") == "end_turn"

        # A request reserves its input and 8,192 output tokens at 10 USD a million:
        # more than 0.05 USD, so none fits.
        changed = await server.conn.set_config_option(
            config_id="budget_usd", session_id=sid, value="0.05"
        )
        by_id = {option.id: option for option in changed.config_options}
        assert by_id["budget_usd"].current_value == "0.05"
        assert await server.prompt(sid, "are you there") == "max_turn_requests"
        assert "budget exhausted" in server.client.text(sid)
        log = server.log(sid)
        (receipt,) = [e["data"] for e in log if e["type"] == "budget/exhausted"]
        assert receipt["limit"] == 0.05
        assert receipt["unit"] == "usd"
        ends = [e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"]
        assert ends == ["completed", "budget"]
        answers = [e for e in log if e["type"] == "assistant/message"]
        assert len(answers) == 1  # the refused request was never sent

        with pytest.raises(RequestError) as refused:
            await server.conn.set_config_option(config_id="budget_usd", session_id=sid, value="-1")
        assert refused.value.code == -32602
        assert "an amount more than 0 or 'off'" in str(refused.value)

        await server.conn.set_config_option(config_id="budget_usd", session_id=sid, value="off")
        assert await server.prompt(sid, "again") == "end_turn"
        assert {"option": "budget_usd", "value": "off"} in [
            e["data"] for e in server.log(sid) if e["type"] == "session/config"
        ]


async def test_a_usd_budget_needs_the_models_prices(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        await server.conn.set_config_option(
            config_id="model", session_id=sid, value="scripted:other"
        )
        with pytest.raises(RequestError) as refused:
            await server.conn.set_config_option(config_id="budget_usd", session_id=sid, value="5")
        assert refused.value.code == -32602
        assert "needs the prices of the session's model" in str(refused.value)


async def test_the_title_request_draws_on_the_sessions_budget(tmp_path: Path) -> None:
    flags = ("--title-model", "scripted", "--max-budget-usd", "5")
    async with serving(tmp_path, *flags, overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        options = {option.id: option for option in created.config_options or []}
        assert options["budget_usd"].current_value == "5"
        assert await server.prompt(sid, "name me please") == "end_turn"
        await server.client.wait_for(
            lambda: any(e["type"] == "session/title" for e in server.log(sid))
        )
        log = server.log(sid)
        purposes = sorted(e["data"]["purpose"] for e in log if e["type"] == "budget/reserved")
        assert purposes == ["step", "title"]
        settled = [e["data"] for e in log if e["type"] == "budget/settled"]
        assert len(settled) == 2 and all(entry["usd"] > 0 for entry in settled)


async def test_acp_with_a_usd_budget_and_no_prices_refuses_its_first_session(
    tmp_path: Path,
) -> None:
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": str(tmp_path), "mcpServers": []},
        },
    ]
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tether.cli.main", "acp", "--model", "offline"),
        "--max-budget-usd",
        "1",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(tmp_path),
    )
    text = "".join(json.dumps(frame) + "\n" for frame in frames)
    out, err = await asyncio.wait_for(process.communicate(text.encode()), 60)
    answers = [json.loads(line) for line in out.decode().splitlines()]
    (refused,) = [answer for answer in answers if answer.get("id") == 2]
    assert refused["error"]["code"] == -32603
    assert "a budget in USD needs the prices of offline" in refused["error"]["message"]
    assert process.returncode == 1
    assert "Traceback" not in err.decode()
