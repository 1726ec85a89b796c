"""The handshake, and prompts answered with their stop reason after their streamed updates."""

from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.helpers import text_block
from acp.schema import AgentThoughtChunk, ImageContentBlock, ResourceContentBlock

from tests.acp.harness import SCRIPTED, serving


async def test_initialize_negotiates_the_version_and_states_capabilities(tmp_path: Path) -> None:
    async with serving(tmp_path, initialize=False) as server:
        answer = await server.conn.initialize(protocol_version=7)
        assert answer.protocol_version == 1
        assert answer.agent_info is not None and answer.agent_info.name == "tether"
        capabilities = answer.agent_capabilities
        assert capabilities is not None and capabilities.load_session is True
        assert capabilities.prompt_capabilities is not None
        assert capabilities.prompt_capabilities.image is False
        assert capabilities.prompt_capabilities.embedded_context is True
        assert answer.auth_methods == []
        # A model that needs no key: no method is offered, so none can be chosen.
        with pytest.raises(RequestError) as refused:
            await server.conn.authenticate(method_id="none")
        assert refused.value.code == -32602


async def test_prompt_streams_text_and_answers_end_turn(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "hello there") == "end_turn"
        # Every update of the turn arrived before the answer.
        assert server.client.text(sid) == "echo: hello there"
        assert await server.prompt(sid, "think twice") == "end_turn"
        thoughts = [u for u in server.client.of(sid) if isinstance(u, AgentThoughtChunk)]
        assert [t.content.text for t in thoughts] == ["pondering twice"]
        assert server.client.text(sid).endswith("echo: twice")


async def test_stop_reasons_follow_the_turn_end(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "long") == "max_tokens"
        assert await server.prompt(sid, "say something forbidden") == "refusal"
        # The provider refusing is a refusal too; what streamed before stays.
        assert await server.prompt(sid, "decline") == "refusal"
        assert server.client.text(sid).endswith("I can")
        with pytest.raises(RequestError) as failed:
            await server.prompt(sid, "fail")
        assert failed.value.code == -32603
        assert "the model is unavailable" in str(failed.value)
        # The session goes on after a failed turn.
        assert await server.prompt(sid, "still there?") == "end_turn"


async def test_a_turn_at_its_step_limit_answers_max_turn_requests(tmp_path: Path) -> None:
    overlay = SCRIPTED + "  - id: agent_loop\n    config: {{max_steps: 3}}\n"
    async with serving(tmp_path, overlay=overlay) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "forever") == "max_turn_requests"
        assert await server.prompt(sid, "hello") == "end_turn"


async def test_a_second_prompt_in_flight_is_rejected(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        held = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        with pytest.raises(RequestError) as busy:
            await server.prompt(sid, "me too")
        assert "already has a prompt in flight" in str(busy.value)
        await server.conn.cancel(session_id=sid)
        assert await held == "cancelled"
        assert await server.prompt(sid, "now") == "end_turn"


async def test_resource_links_and_embedded_text_reach_the_model(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        link = ResourceContentBlock(type="resource_link", name="notes.md", uri="file:///notes.md")
        answer = await server.conn.prompt(session_id=sid, prompt=[text_block("see"), link])
        assert answer.stop_reason == "end_turn"
        assert "[@notes.md](file:///notes.md)" in server.client.text(sid)
        image = ImageContentBlock(type="image", data="aGk=", mime_type="image/png")
        with pytest.raises(RequestError) as refused:
            await server.conn.prompt(session_id=sid, prompt=[image])
        assert refused.value.code == -32602 and "'image'" in str(refused.value)
