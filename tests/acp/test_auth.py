"""ACP authentication: without the model's key, ``initialize`` says what to set and
sessions wait for it; with it, ``authenticate`` succeeds and sessions use the model."""

from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import EnvVarAuthMethod

from tests.acp.harness import LEDGER, serving
from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import KEY, text_answer

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
