"""What an editor gets beyond prompts: usage and cost, the model picker, slash commands,
plans, steering and queueing, resume and close, paged lists — through a real ``tether acp``.

Every frame tether writes in these tests parses with the ACP SDK's schema models
(:func:`assert_frames_parse`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    RequestPermissionRequest,
    SessionInfoUpdate,
    SessionNotification,
    ToolCallStart,
    UsageUpdate,
)
from acp.utils import serialize_params

from tests.acp.harness import SCRIPTED, AcpProcess, serving

CATALOG = (
    SCRIPTED
    + """\
  - id: llm
    plugin: tether.llm.service
    config:
      models:
        scripted:
          name: Scripted
          context_window: 1000
          prices:
            input: 2.0
            output: 10.0
            cached_input: 0.5
        "scripted:other":
          name: Other
        "nowhere:model":
          name: Nowhere
"""
)
"""The scripted model with a catalog: prices and a window for ``scripted``, two more models."""


def assert_frames_parse(server: AcpProcess) -> int:
    """Every ``session/update`` and permission request tether wrote is what the SDK's
    models hold; returns how many were checked."""
    checked = 0
    for frame in server.frames:
        method = frame.get("method")
        if method == "session/update":
            params = frame["params"]
            assert serialize_params(SessionNotification.model_validate(params)) == params
            checked += 1
        elif method == "session/request_permission":
            RequestPermissionRequest.model_validate(frame["params"])
            checked += 1
    return checked


def updates_of(server: AcpProcess, sid: str, kind: type[Any]) -> list[Any]:
    return [u for u in server.client.of(sid) if isinstance(u, kind)]


async def test_usage_cost_title_and_the_model_picker(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        created = await server.conn.new_session(cwd=str(server.home), mcp_servers=[])
        sid = created.session_id
        options = {option.id: option for option in created.config_options or []}
        assert options["model"].category == "model"
        assert options["model"].current_value == "scripted"
        assert [o.value for o in options["model"].options] == [
            "scripted",
            "scripted:other",
            "nowhere:model",
        ]
        assert options["mode"].current_value == "auto"

        assert await server.prompt(sid, "hello  there") == "end_turn"
        (usage,) = updates_of(server, sid, UsageUpdate)
        # The prompt and the environment note: 20 input tokens (4 cached), 3 output:
        # 16 * 2.0 + 4 * 0.5 + 3 * 10.0 per million.
        assert (usage.used, usage.size) == (23, 1000)
        assert usage.cost is not None and usage.cost.currency == "USD"
        assert usage.cost.amount == pytest.approx(64e-6)
        (info,) = updates_of(server, sid, SessionInfoUpdate)
        assert info.title == "hello there"
        (answer,) = [e for e in server.log(sid) if e["type"] == "assistant/message"]
        assert answer["data"]["usage"] == {
            "input_tokens": 20,
            "output_tokens": 3,
            "reasoning_tokens": 1,
            "cached_input_tokens": 4,
        }

        switched = await server.conn.set_config_option(
            config_id="model", session_id=sid, value="scripted:other"
        )
        by_id = {option.id: option for option in switched.config_options}
        assert by_id["model"].current_value == "scripted:other"
        assert await server.prompt(sid, "which model") == "end_turn"
        assert server.client.text(sid).endswith("model: scripted:other")
        assert {"option": "model", "value": "scripted:other"} in [
            e["data"] for e in server.log(sid) if e["type"] == "session/config"
        ]

        for config_id, value, message in [
            ("model", "gpt-9", "unknown model 'gpt-9'"),
            ("temperature", "1", "unknown config option 'temperature'"),
            ("mode", "yolo", "unknown mode 'yolo'"),
        ]:
            with pytest.raises(RequestError) as refused:
                await server.conn.set_config_option(
                    config_id=config_id, session_id=sid, value=value
                )
            assert refused.value.code == -32602 and message in str(refused.value)
        with pytest.raises(RequestError) as unknown:
            await server.conn.set_config_option(config_id="model", session_id="nope", value="x")
        assert unknown.value.code == -32602 and "'nope'" in str(unknown.value)

        # A model no provider serves fails the next prompt; the session stays usable.
        await server.conn.set_config_option(
            config_id="model", session_id=sid, value="nowhere:model"
        )
        with pytest.raises(RequestError) as rejected:
            await server.prompt(sid, "anyone?")
        assert rejected.value.code == -32603 and "nowhere" in str(rejected.value)
        await server.conn.set_config_option(config_id="model", session_id=sid, value="scripted")
        assert await server.prompt(sid, "back again") == "end_turn"
        assert server.client.text(sid).endswith("echo: back again")
        assert assert_frames_parse(server) > 10


async def ext(server: AcpProcess, method: str, sid: str, text: str) -> dict[str, Any]:
    prompt = [{"type": "text", "text": text}]
    return await server.conn.ext_method(method, {"sessionId": sid, "prompt": prompt})


async def test_slash_commands_and_the_todo_plan(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay=CATALOG) as server:
        sid = await server.new_session()
        await server.client.wait_for(lambda: bool(updates_of(server, sid, AvailableCommandsUpdate)))
        offered = updates_of(server, sid, AvailableCommandsUpdate)[0].available_commands
        assert {"clear", "compact", "model", "mode", "cost", "shout"} <= {c.name for c in offered}
        assert await server.prompt(sid, "/compact") == "end_turn"
        assert server.client.text(sid).endswith("nothing to compact yet")

        assert await server.prompt(sid, "/shout hi there") == "end_turn"
        assert server.client.text(sid).endswith("HI THERE")
        with pytest.raises(RequestError) as refused:
            await server.prompt(sid, "/shout")
        assert refused.value.code == -32602 and "needs some text" in str(refused.value)

        assert await server.prompt(sid, "one") == "end_turn"
        assert await server.prompt(sid, "/clear") == "end_turn"
        assert await server.prompt(sid, "how many") == "end_turn"
        assert server.client.text(sid).endswith("messages: 1")
        kinds = [e["type"] for e in server.log(sid)]
        assert "history/cleared" in kinds and kinds.index("history/cleared") > kinds.index(
            "assistant/message"
        )

        assert await server.prompt(sid, "/cost") == "end_turn"
        assert "tokens in context of 1,000" in server.client.text(sid)
        assert await server.prompt(sid, "/mode auto") == "end_turn"
        assert [u.current_mode_id for u in updates_of(server, sid, CurrentModeUpdate)] == ["auto"]
        assert updates_of(server, sid, ConfigOptionUpdate)

        # The todo tool's list is the plan (and needs no approval even in ask mode).
        assert await server.prompt(sid, "/mode ask") == "end_turn"
        assert await server.prompt(sid, "plan") == "end_turn"
        (plan,) = updates_of(server, sid, AgentPlanUpdate)
        assert [(e.content, e.priority, e.status) for e in plan.entries] == [
            ("read the code", "high", "completed"),
            ("write the fix", "medium", "in_progress"),
        ]
        assert not server.client.permission_requests
        assert assert_frames_parse(server) > 10


async def test_steering_reaches_the_running_turn_and_queueing_runs_its_own_turn(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG) as server:
        sid = await server.new_session()
        with pytest.raises(RequestError) as idle:
            await ext(server, "tether/steer", sid, "nothing runs")
        assert idle.value.code == -32602 and "idle" in str(idle.value)
        with pytest.raises(RequestError) as unknown:
            await ext(server, "tether/steer", "nope", "who?")
        assert unknown.value.code == -32602

        running = server.start_prompt(sid, "bash sleep 1; echo slept")
        await server.client.wait_for(lambda: bool(updates_of(server, sid, ToolCallStart)))
        steered = await ext(server, "tether/steer", sid, "steered")
        assert steered["queue"] == "steering"
        assert await running == "end_turn"
        assert server.client.text(sid).endswith("echo: steered")

        queued = await ext(server, "tether/queue", sid, "queued")
        assert queued["queue"] == "queued" and queued["messageId"]
        await server.client.wait_for(server.client.saw_text(sid, "echo: queued"))

        held = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        never = await ext(server, "tether/queue", sid, "never runs")
        await server.conn.cancel(session_id=sid)
        assert await held == "cancelled"
        said = [
            block["text"]
            for e in server.log(sid)
            if e["type"] == "user/message"
            for block in e["data"]["content"]
        ]
        assert "steered" in said and "queued" in said and "never runs" not in said
        assert {"queue": "queued", "op": "cancel", "messages": [{"id": never["messageId"]}]} in [
            e["data"] for e in server.log(sid) if e["type"] == "agent/inbox/spliced"
        ]
        assert assert_frames_parse(server) > 10


async def test_resume_close_list_and_what_the_log_restores(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with serving(tmp_path, overlay=CATALOG) as server:
        server.client.answer = "allow-always"
        asking = await server.new_session()
        assert await server.prompt(asking, "bash echo hi") == "end_turn"
        assert len(server.client.permission_requests) == 1
        auto = await server.new_session()
        await server.conn.set_session_mode(session_id=auto, mode_id="auto")
        elsewhere = await server.new_session(project)
        assert await server.prompt(elsewhere, "in the project") == "end_turn"

        await server.conn.close_session(session_id=auto)
        with pytest.raises(RequestError) as closed:
            await server.prompt(auto, "still there?")
        assert closed.value.code == -32602
        assert f"disposed {auto}" in server.ledger()
        with pytest.raises(RequestError) as unknown:
            await server.conn.close_session(session_id=auto)
        assert unknown.value.code == -32602

        listed = await server.conn.list_sessions()
        assert {s.session_id for s in listed.sessions} == {asking, auto, elsewhere}
        assert listed.next_cursor is None
        only = await server.conn.list_sessions(cwd=str(project))
        assert [(s.session_id, s.title) for s in only.sessions] == [(elsewhere, "in the project")]
        with pytest.raises(RequestError) as bad_cursor:
            await server.conn.list_sessions(cursor="not-a-cursor")
        assert bad_cursor.value.code == -32602
        assert_frames_parse(server)

    async with serving(tmp_path, overlay=CATALOG) as server:
        resumed = await server.conn.resume_session(
            session_id=asking, cwd=str(server.home), mcp_servers=[]
        )
        assert resumed.modes is not None and resumed.modes.current_mode_id == "ask"
        await asyncio.sleep(0)
        assert not any(isinstance(u, AgentMessageChunk) for u in server.client.of(asking))
        # The rule was kept in the log: the same command runs without asking again.
        assert await server.prompt(asking, "bash echo again") == "end_turn"
        assert server.client.permission_requests == []
        assert server.client.text(asking).endswith("done: again")

        loaded = await server.conn.load_session(cwd=str(server.home), session_id=auto)
        assert loaded.modes is not None and loaded.modes.current_mode_id == "auto"
        with pytest.raises(RequestError) as missing:
            await server.conn.resume_session(
                session_id="20200101-000000-0000abcd", cwd=str(server.home), mcp_servers=[]
            )
        assert missing.value.code == -32002
        assert_frames_parse(server)


async def test_initialize_advertises_what_works(tmp_path: Path) -> None:
    async with serving(tmp_path, initialize=False) as server:
        answer = await server.conn.initialize(protocol_version=1)
        sessions = answer.agent_capabilities.session_capabilities
        assert sessions is not None
        assert sessions.list is not None and sessions.resume is not None
        assert sessions.close is not None
        assert answer.field_meta == {
            "tether": {"extensions": ["_tether/steer", "_tether/queue"], "version": 1}
        }


async def test_a_title_model_names_the_session_after_its_first_prompt(tmp_path: Path) -> None:
    async with serving(tmp_path, "--title-model", "scripted", overlay=CATALOG) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "name me  please") == "end_turn"
        await server.client.wait_for(lambda: len(updates_of(server, sid, SessionInfoUpdate)) == 2)
        titles = [u.title for u in updates_of(server, sid, SessionInfoUpdate)]
        assert titles == ["name me please", "Scripted: name me please"]
        # The naming request is not part of the conversation nor of its usage.
        assert await server.prompt(sid, "how many") == "end_turn"
        # The environment note, the prompt, its answer, this prompt.
        assert server.client.text(sid).endswith("messages: 4")
        assert [u.used for u in updates_of(server, sid, UsageUpdate)] == [24]
        assert_frames_parse(server)
    async with serving(tmp_path, overlay=CATALOG) as server:
        listed = await server.conn.list_sessions()
        assert [(s.session_id, s.title) for s in listed.sessions] == [
            (sid, "Scripted: name me please")
        ]
