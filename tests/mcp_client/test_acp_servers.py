"""MCP servers offered by the ACP client: started per session, owned by it, gone with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import AvailableCommandsUpdate

from tests.acp.harness import SCRIPTED, AcpProcess, serving
from tests.mcp_client.support import SDK_SERVER, http, http_server, results, sse, stdio


async def new_session(server: AcpProcess, *servers: object, cwd: Path | None = None) -> str:
    response = await server.conn.new_session(cwd=str(cwd or server.home), mcp_servers=list(servers))
    return response.session_id


def call(tool: str, **arguments: object) -> str:
    return f"/tool {tool} {json.dumps(arguments)}"


async def test_a_stdio_server_tools_are_called_as_mcp_server_tool(tmp_path: Path) -> None:
    """Called with their arguments checked against the server's schema; the server's
    environment is a tool's (no secrets) plus the entry's own ``env``; the session's
    permission mode applies."""
    secret = {"OPENAI_API_KEY": "sk-hidden"}
    async with serving(tmp_path, "--mode", "auto", model="offline", env=secret) as server:
        sid = await new_session(server, stdio("files", GREETING="hello"))
        for prompt in (
            call("mcp__files__echo", text="hi"),
            call("mcp__files__echo", text=5),
            call("mcp__files__env", name="GREETING"),
            call("mcp__files__env", name="OPENAI_API_KEY"),
        ):
            assert await server.prompt(sid, prompt) == "end_turn"
        echo, invalid, greeting, key = results(server.log(sid))
        assert echo == ("mcp__files__echo", "echo: hi", False)
        assert invalid[2] and "invalid arguments" in invalid[1] and "text" in invalid[1]
        assert greeting[1:] == ("hello", False) and key[1:] == ("<unset>", False)

        await server.conn.set_session_mode(session_id=sid, mode_id="ask")
        server.client.answer = "reject-once"
        assert await server.prompt(sid, call("mcp__files__echo", text="no")) == "end_turn"
        ((_, tool_call, _),) = server.client.permission_requests
        assert "mcp__files__echo" in (tool_call.title or "")
        content, is_error = results(server.log(sid))[-1][1:]
        assert is_error and content.startswith("denied")


async def test_an_image_a_tool_answers_reaches_a_model_that_accepts_images(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("files"))
        assert await server.prompt(sid, call("mcp__files__picture")) == "end_turn"
        (result,) = [e["data"] for e in server.log(sid) if e["type"] == "tool/result"]
        assert result["content"] == "[image: image/png, 67 bytes (attached)]"
        ((image,),) = [result["images"]]
        assert image["url"].startswith("data:image/png;base64,iVBORw0KGgo")


async def test_a_server_of_session_a_is_invisible_to_b_and_dies_with_a(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        a = await new_session(server, stdio("files"))
        b = await new_session(server, stdio("other"))
        assert await server.prompt(a, call("mcp__files__pid")) == "end_turn"
        assert await server.prompt(b, call("mcp__other__pid")) == "end_turn"
        pids = [int(results(server.log(sid))[0][1]) for sid in (a, b)]
        assert pids[0] != pids[1] and all(_alive(pid) for pid in pids)
        assert await server.prompt(b, call("mcp__files__pid")) == "end_turn"
        # B's model is not even offered A's tools.
        assert len(results(server.log(b))) == 1
        assert "There is no tool 'mcp__files__pid' here" in server.client.text(b)
        assert "mcp__files__pid" not in server.client.text(b).partition("offered are:")[2]
        await server.close_stdin()
        assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("mode", ["http", "sse"])
async def test_an_http_server_tools_are_called_over_its_transport(
    tmp_path: Path, mode: str
) -> None:
    async with (
        http_server(mode) as url,
        serving(tmp_path, "--mode", "auto", model="offline") as server,
    ):
        offered = http("web", url) if mode == "http" else sse("web", url)
        sid = await new_session(server, offered)
        assert await server.prompt(sid, call("mcp__web__echo", text=mode)) == "end_turn"
        assert results(server.log(sid)) == [("mcp__web__echo", f"echo: {mode}", False)]


async def test_initialize_advertises_the_mcp_transports_that_work(tmp_path: Path) -> None:
    async with serving(tmp_path, initialize=False) as server:
        answer = await server.conn.initialize(protocol_version=1)
        capabilities = answer.agent_capabilities
        assert capabilities is not None and capabilities.mcp_capabilities is not None
        assert capabilities.mcp_capabilities.http and capabilities.mcp_capabilities.sse


def configured(every: dict[str, object], agents: dict[str, object] | None = None) -> str:
    """The test composition with the ``mcp`` row configured (JSON is YAML)."""
    config = json.dumps({"servers": every, "agents": agents or {}})
    escaped = config.replace("{", "{{").replace("}", "}}")
    return SCRIPTED + f"  - id: mcp\n    plugin: tether.mcp.plugin\n    config: {escaped}\n"


async def test_configured_servers_serve_every_session_and_their_own_agent(
    tmp_path: Path,
) -> None:
    sdk = {"command": sys.executable, "args": [SDK_SERVER]}
    home = tmp_path / "home"
    async with serving(tmp_path, model="offline", home=home) as server:
        stored = await new_session(server)
    overlay = configured({"shared": sdk}, {stored: {"servers": {"own": sdk}}})
    async with serving(tmp_path, "--mode", "auto", overlay=overlay, model="offline") as server:
        fresh = await new_session(server)
        await server.conn.load_session(cwd=str(home), session_id=stored, mcp_servers=[])
        for sid in (fresh, stored):
            assert await server.prompt(sid, call("mcp__shared__echo", text=sid)) == "end_turn"
        assert await server.prompt(stored, call("mcp__own__echo", text="mine")) == "end_turn"
        assert await server.prompt(fresh, call("mcp__own__echo", text="mine")) == "end_turn"
        assert [r[1] for r in results(server.log(stored))] == [f"echo: {stored}", "echo: mine"]
        assert [r[1] for r in results(server.log(fresh))] == [f"echo: {fresh}"]


async def test_a_bad_mcp_configuration_names_the_field(tmp_path: Path) -> None:
    overlay = configured({"broken": {"args": ["x"]}})
    async with serving(tmp_path, overlay=overlay, model="offline") as server:
        await new_session(server)
    assert "config.servers.broken.command: must be a non-empty string" in server.stderr()


async def test_a_resource_mention_in_a_prompt_attaches_it_and_an_unknown_one_is_refused(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("files"))
        assert await server.prompt(sid, "what is in @files:notes://today?") == "end_turn"
        spliced = [e["data"] for e in server.log(sid) if e["type"] == "agent/inbox/spliced"]
        asked = {"type": "text", "text": "what is in @files:notes://today?"}
        (content,) = [
            message["content"]
            for data in spliced
            for message in data["messages"]
            if message.get("content", [None])[0] == asked
        ]
        assert content[1:] == [
            {
                "type": "text",
                "text": '<resource uri="notes://today">\nbuy milk\n</resource>',
            }
        ]
        with pytest.raises(RequestError) as refused:
            await server.prompt(sid, "and @files:notes://nothing")
        assert refused.value.code == -32602
        assert str(refused.value) == (
            "Invalid params: @files:notes://nothing not attached: Unknown resource: notes://nothing"
        )


async def test_a_server_prompt_is_a_slash_command_that_sends_its_text(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("files"))
        client = server.client
        await client.wait_for(
            lambda: any(
                isinstance(u, AvailableCommandsUpdate)
                and any(c.name == "mcp__files__review" for c in u.available_commands)
                for u in client.of(sid)
            )
        )
        offered = [u for u in client.of(sid) if isinstance(u, AvailableCommandsUpdate)][-1]
        (review,) = [c for c in offered.available_commands if c.name == "mcp__files__review"]
        assert review.description == "Ask for a review of a topic."
        assert review.input is not None and review.input.root.hint == "topic=… [tone=…]"

        assert await server.prompt(sid, '/mcp__files__review "the build" tone=terse') == "end_turn"
        wanted = {"type": "text", "text": "Review the build in a terse tone."}

        def sent() -> bool:
            return any(
                wanted in message.get("content", [])
                for e in server.log(sid)
                if e["type"] == "agent/inbox/spliced"
                for message in e["data"]["messages"]
            )

        await client.wait_for(sent)
        for bad, reason in (
            ("/mcp__files__review", "prompt 'review' needs topic"),
            (
                "/mcp__files__review topic=a colour=red",
                "prompt 'review' has no argument 'colour' (it takes: topic, tone)",
            ),
            (
                "/mcp__files__review a b c",
                "prompt 'review' takes 2 argument(s): 'c' is one too many",
            ),
        ):
            with pytest.raises(RequestError) as refused:
                await server.prompt(sid, bad)
            assert str(refused.value) == f"Invalid params: {reason}", bad


def _latest_commands(server: AcpProcess, sid: str) -> set[str]:
    """The command names of the session's latest ``available_commands_update``."""
    updates = [u for u in server.client.of(sid) if isinstance(u, AvailableCommandsUpdate)]
    return {c.name for c in updates[-1].available_commands} if updates else set()


async def test_a_changed_prompt_list_is_told_to_the_sessions_whose_server_lists_it(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("files"))
        other = await new_session(server)
        client = server.client
        await client.wait_for(lambda: "mcp__files__review" in _latest_commands(server, sid))
        await client.wait_for(lambda: bool(_latest_commands(server, other)))
        assert not any(name.startswith("mcp__") for name in _latest_commands(server, other))

        swap = call("mcp__files__swap_prompt", name="fresh")
        assert await server.prompt(sid, swap) == "end_turn"
        await client.wait_for(
            lambda: (
                {"mcp__files__fresh"} <= _latest_commands(server, sid)
                and "mcp__files__review" not in _latest_commands(server, sid)
            )
        )
        assert not any(name.startswith("mcp__") for name in _latest_commands(server, other))
