"""ACP authentication: without the model's key, ``initialize`` says what to set and
sessions wait for it; with it, ``authenticate`` succeeds and sessions use the model."""

import asyncio
import json
from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import AuthCapabilities, ClientCapabilities, EnvVarAuthMethod, TerminalAuthMethod

from tests.acp.harness import LEDGER, serving
from tests.adapters.fake_server import FakeServer, error, stream
from tests.adapters.support import KEY, call, delta, text_answer, usage
from tests.cli.terminal import Terminal
from tether.acp.auth import model_auth

OVERLAY = "plugins:\n" + LEDGER
NO_KEYS = {"DEEPSEEK_API_KEY": "", "TETHER_API_KEY": "", "TETHER_MODEL": ""}
"""An environment without any key the DeepSeek model could use (empty counts as unset)."""


async def test_a_missing_key_is_advertised_as_an_env_var_method_and_refuses_sessions(
    tmp_path: Path,
) -> None:
    async with serving(
        tmp_path, initialize=False, overlay=OVERLAY, model="deepseek:deepseek-chat", env=NO_KEYS
    ) as server:
        answer = await server.conn.initialize(protocol_version=1)
        assert answer.auth_methods is not None
        (method,) = answer.auth_methods
        assert isinstance(method, EnvVarAuthMethod)
        assert (method.type, method.id) == ("env_var", "deepseek-api-key")
        assert [var.name for var in method.vars] == ["DEEPSEEK_API_KEY"]
        with pytest.raises(RequestError) as refused:
            await server.new_session()
        assert refused.value.code == -32000
        assert "DEEPSEEK_API_KEY" in str(refused.value)
        with pytest.raises(RequestError) as unset:
            await server.conn.authenticate(method_id="deepseek-api-key")
        assert unset.value.code == -32000
        assert "DEEPSEEK_API_KEY or TETHER_API_KEY is not set" in str(unset.value)
        with pytest.raises(RequestError) as unknown:
            await server.conn.authenticate(method_id="password")
        assert unknown.value.code == -32602
        await server.close_stdin()
        assert server.process.returncode == 0
        assert "Traceback" not in server.stderr()


async def test_started_with_the_key_authenticate_succeeds_and_sessions_use_the_model(
    tmp_path: Path,
) -> None:
    async with FakeServer() as model:
        model.queue(stream(text_answer("Hello with a key")))
        async with serving(
            tmp_path,
            "--base-url",
            f"{model.url}/v1",
            initialize=False,
            overlay=OVERLAY,
            model="deepseek:deepseek-chat",
            env={**NO_KEYS, "DEEPSEEK_API_KEY": KEY},
        ) as server:
            answer = await server.conn.initialize(protocol_version=1)
            assert [m.id for m in answer.auth_methods or []] == ["deepseek-api-key"]
            await server.conn.authenticate(method_id="deepseek-api-key")
            sid = await server.new_session()
            assert await server.prompt(sid, "say hello") == "end_turn"
            assert server.client.text(sid) == "Hello with a key"


TERMINAL_CLIENT = ClientCapabilities(auth=AuthCapabilities(terminal=True))
"""A client that runs ``terminal`` authentication methods."""

HALF, OTHER_HALF = "sk-stored-", "5be1c0ffee"
STORED_KEY = HALF + OTHER_HALF
"""The key typed at sign-in; the tool's command names it only in halves."""

PROBE = (
    f"a={HALF}; b={OTHER_HALF}; "
    "e=$(tr '\\0' '\\n' < /proc/$PPID/environ | grep -c \"$a$b\"); "
    'o=$(env | grep -c "$a$b"); '
    'echo "found environ=$e own=$o"'
)


def bash_call(command: str) -> list[object]:
    """A streamed answer that is one ``bash`` tool call running ``command``."""
    arguments = json.dumps({"command": command})
    return [
        delta(calls=[call(0, arguments, id="call-1", name="bash")]),
        delta(finish="tool_calls"),
        usage(5, 5),
        "[DONE]",
    ]


def sign_in(home: Path, key: str) -> str:
    """``tether auth login deepseek`` on a terminal, typing ``key``; its output."""
    terminal = Terminal(home, "login", "deepseek", command="auth", env=NO_KEYS)
    try:
        terminal.expect("DeepSeek API key (not shown): ")
        terminal.send(key.encode() + b"\r")
        terminal.expect("Stored the DeepSeek API key")
        assert terminal.finish() == 0
        return terminal.output()
    finally:
        terminal.close()


async def test_terminal_sign_in_is_advertised_and_its_key_reaches_the_model_not_the_tools(
    tmp_path: Path,
) -> None:
    async with FakeServer() as model:
        model.queue(stream(bash_call(PROBE)), stream(text_answer("Signed in")))
        async with serving(
            tmp_path,
            "--base-url",
            f"{model.url}/v1",
            "--mode",
            "auto",
            initialize=False,
            overlay=OVERLAY,
            model="deepseek:deepseek-chat",
            env=NO_KEYS,
        ) as server:
            answer = await server.conn.initialize(
                protocol_version=1, client_capabilities=TERMINAL_CLIENT
            )
            methods = {method.id: method for method in answer.auth_methods or []}
            assert list(methods) == ["deepseek-api-key", "deepseek-login"]
            terminal = methods["deepseek-login"]
            assert isinstance(terminal, TerminalAuthMethod)
            assert terminal.args == ["auth", "login", "deepseek"]
            with pytest.raises(RequestError) as early:
                await server.conn.authenticate(method_id="deepseek-login")
            assert early.value.code == -32000
            assert "complete the sign-in in the terminal" in str(early.value)
            with pytest.raises(RequestError):
                await server.new_session()

            shown = await asyncio.to_thread(sign_in, server.home, STORED_KEY)
            assert STORED_KEY not in shown

            await server.conn.authenticate(method_id="deepseek-login")
            sid = await server.new_session()
            assert await server.prompt(sid, "who am I?") == "end_turn"
            assert server.client.text(sid) == "Signed in"
            first, second = model.requests
            assert first.headers["authorization"] == f"Bearer {STORED_KEY}"
            assert "found environ=0 own=0" in json.dumps(second.json)
            await server.close_stdin()
            assert STORED_KEY not in server.stderr()


def test_a_damaged_credentials_file_is_blamed_on_the_provider_of_the_model_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    (tmp_path / "credentials.json").write_text("not json")
    auth = model_auth(None, {"TETHER_MODEL": "anthropic:claude-test"})
    assert auth.missing is not None and "credentials file" in auth.missing
    assert [method["id"] for method in auth.advertise({})] == ["anthropic-api-key"]


OFFLINE = "This is the offline model"


async def test_signing_in_moves_the_new_sessions_of_a_tether_without_a_model_to_the_providers(
    tmp_path: Path,
) -> None:
    async with FakeServer() as model:
        model.queue(stream(text_answer("Hello from DeepSeek")))
        env = {**NO_KEYS, "TETHER_BASE_URL": f"{model.url}/v1"}
        async with serving(
            tmp_path, initialize=False, overlay=OVERLAY, model=None, env=env
        ) as server:
            answer = await server.conn.initialize(
                protocol_version=1, client_capabilities=TERMINAL_CLIENT
            )
            methods = [method.id for method in answer.auth_methods or []]
            assert methods == ["deepseek-api-key", "deepseek-login"]
            before = await server.new_session()
            assert await server.prompt(before, "hello") == "end_turn"
            assert OFFLINE in server.client.text(before)

            await asyncio.to_thread(sign_in, server.home, STORED_KEY)
            await server.conn.authenticate(method_id="deepseek-login")
            after = await server.new_session()
            assert await server.prompt(after, "say hello") == "end_turn"
            assert server.client.text(after) == "Hello from DeepSeek"
            (request,) = model.requests
            assert request.json["model"] == "deepseek-chat"
            assert request.headers["authorization"] == f"Bearer {STORED_KEY}"

            # The session opened before keeps its model.
            assert await server.prompt(before, "again") == "end_turn"
            assert server.client.text(before).count(OFFLINE) == 2
            assert len(model.requests) == 1
            await server.close_stdin()
            assert server.process.returncode == 0
            assert "Traceback" not in server.stderr()
            assert STORED_KEY not in server.stderr()


async def test_signing_in_never_replaces_the_offline_model_tether_yml_configures(
    tmp_path: Path,
) -> None:
    configured = OVERLAY + "  - id: agent_loop\n    config: {{model: offline}}\n"
    async with FakeServer() as model:
        env = {**NO_KEYS, "TETHER_BASE_URL": f"{model.url}/v1"}
        async with serving(
            tmp_path, initialize=False, overlay=configured, model=None, env=env
        ) as server:
            answer = await server.conn.initialize(protocol_version=1)
            assert [method.id for method in answer.auth_methods or []] == ["deepseek-api-key"]
            await asyncio.to_thread(sign_in, server.home, STORED_KEY)
            await server.conn.authenticate(method_id="deepseek-api-key")
            sid = await server.new_session()
            assert await server.prompt(sid, "hello") == "end_turn"
            assert OFFLINE in server.client.text(sid)
            assert model.requests == []


async def test_the_offline_model_named_on_the_command_line_offers_no_sign_in(
    tmp_path: Path,
) -> None:
    async with serving(
        tmp_path, initialize=False, overlay=OVERLAY, model="offline", env=NO_KEYS
    ) as server:
        answer = await server.conn.initialize(
            protocol_version=1, client_capabilities=TERMINAL_CLIENT
        )
        assert answer.auth_methods == []
        with pytest.raises(RequestError) as refused:
            await server.conn.authenticate(method_id="deepseek-api-key")
        assert refused.value.code == -32602
        sid = await server.new_session()
        assert await server.prompt(sid, "hello") == "end_turn"
        assert OFFLINE in server.client.text(sid)


@pytest.mark.parametrize("named", [None, "deepseek:deepseek-chat"])
async def test_a_wrong_key_fails_the_first_prompt_in_one_line_and_signing_in_again_fixes_it(
    tmp_path: Path, named: str | None
) -> None:
    wrong = "sk-wrong-0123456789"
    async with FakeServer() as model:
        refusal = {"error": {"message": "Authentication Fails, Your api key is invalid"}}
        model.queue(error(401, refusal), stream(text_answer("Right key")))
        env = {**NO_KEYS, "TETHER_BASE_URL": f"{model.url}/v1"}
        async with serving(
            tmp_path, initialize=False, overlay=OVERLAY, model=named, env=env
        ) as server:
            await server.conn.initialize(protocol_version=1, client_capabilities=TERMINAL_CLIENT)
            await asyncio.to_thread(sign_in, server.home, wrong)
            await server.conn.authenticate(method_id="deepseek-login")
            sid = await server.new_session()
            with pytest.raises(RequestError) as failed:
                await server.prompt(sid, "hello")
            assert failed.value.code == -32603
            assert str(failed.value) == (
                "the turn failed: deepseek: HTTP 401 (auth): "
                "Authentication Fails, Your api key is invalid"
            )

            await asyncio.to_thread(sign_in, server.home, STORED_KEY)
            await server.conn.authenticate(method_id="deepseek-login")
            assert await server.prompt(sid, "hello again") == "end_turn"
            assert server.client.text(sid) == "Right key"
            first, second = model.requests
            assert first.headers["authorization"] == f"Bearer {wrong}"
            assert second.headers["authorization"] == f"Bearer {STORED_KEY}"


async def test_a_model_named_only_in_tether_yml_without_its_key_says_which_key_to_set(
    tmp_path: Path,
) -> None:
    configured = OVERLAY + "  - id: agent_loop\n    config: {{model: 'anthropic'}}\n"
    env = {**NO_KEYS, "ANTHROPIC_API_KEY": ""}
    async with serving(tmp_path, overlay=configured, model=None, env=env) as server:
        with pytest.raises(RequestError) as refused:
            await server.new_session()
        assert refused.value.code == -32603
        assert str(refused.value) == (
            "tether failed to start: model 'anthropic' needs an API key: set "
            "ANTHROPIC_API_KEY or TETHER_API_KEY, or store one with: tether auth login anthropic"
        )
        await server.close_stdin()
        assert "Traceback" not in server.stderr()
