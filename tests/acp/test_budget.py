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


@pytest.mark.parametrize(
    ("option", "value", "scope", "unit"),
    [
        ("budget_turn_usd", "0.05", "turn", "usd"),
        ("budget_tokens", "50", "session", "tokens"),
        ("budget_turn_tokens", "50", "turn", "tokens"),
    ],
)
async def test_each_budget_option_stops_the_next_request(
    tmp_path: Path, option: str, value: str, scope: str, unit: str
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        offered = {o.id: o for o in created.config_options or []}
        assert offered[option].current_value == "off"
        assert await server.prompt(sid, "hello") == "end_turn"
        # Every request reserves its 8,192 output tokens: more than 50 tokens, or 0.05 USD.
        changed = await server.conn.set_config_option(config_id=option, session_id=sid, value=value)
        assert {o.id: o for o in changed.config_options}[option].current_value == value
        assert await server.prompt(sid, "are you there") == "max_turn_requests"
        (receipt,) = [e["data"] for e in server.log(sid) if e["type"] == "budget/exhausted"]
        assert (receipt["budget"], receipt["unit"], receipt["limit"]) == (scope, unit, float(value))
        await server.conn.set_config_option(config_id=option, session_id=sid, value="off")
        assert await server.prompt(sid, "again") == "end_turn"


@pytest.mark.parametrize("value", ["1.5", "-3", "0", "many"])
async def test_a_token_budget_option_takes_a_whole_number(tmp_path: Path, value: str) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        with pytest.raises(RequestError) as refused:
            await server.conn.set_config_option(
                config_id="budget_tokens", session_id=created.session_id, value=value
            )
        assert refused.value.code == -32602
        assert "a budget in tokens is a whole number more than 0" in str(refused.value)
        assert [e for e in server.log(created.session_id) if e["type"] == "session/config"] == []


async def test_a_token_budget_needs_no_prices(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        await server.conn.set_config_option(
            config_id="model", session_id=sid, value="scripted:other"
        )
        await server.conn.set_config_option(config_id="budget_tokens", session_id=sid, value="50")
        assert await server.prompt(sid, "are you there") == "max_turn_requests"


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


async def test_the_options_show_the_limits_set_by_flags(tmp_path: Path) -> None:
    flags = ("--max-turn-usd", "0.5", "--max-budget-tokens", "10000000")
    async with serving(tmp_path, *flags, overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        offered = {o.id: o for o in created.config_options or []}
        shown = {each: offered[each].current_value for each in offered if "budget" in each}
        assert shown == {
            "budget_usd": "off",
            "budget_turn_usd": "0.5",
            "budget_tokens": "10000000",
            "budget_turn_tokens": "off",
        }
        names = [o.name for o in offered["budget_tokens"].options]
        assert names[:2] == ["No limit", "10,000,000 tokens"]
