"""Choosing the model before anything starts: precedence, keys, base URLs, composition rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.credentials import write_keys
from tether.llm.adapters.settings import (
    OFFLINE_NOTICE,
    ModelSettings,
    ModelSettingsError,
    resolve_model_settings,
)
from tether.runtime.schema import Secret

DEEPSEEK = {"DEEPSEEK_API_KEY": "sk-deep"}


def test_given_model_wins_over_environment_and_deepseek_key() -> None:
    env = {**DEEPSEEK, "TETHER_MODEL": "deepseek:deepseek-reasoner", "OPENAI_API_KEY": "sk-oa"}

    settings = resolve_model_settings("openai:gpt-4.1", env=env)

    assert (settings.model, settings.source) == ("openai:gpt-4.1", "given")
    assert settings.api_key == Secret("sk-oa")
    assert settings.notice is None


def test_tether_model_wins_over_deepseek_key() -> None:
    env = {**DEEPSEEK, "TETHER_MODEL": "deepseek:deepseek-reasoner"}

    settings = resolve_model_settings(env=env)

    assert (settings.model, settings.source) == ("deepseek:deepseek-reasoner", "TETHER_MODEL")


def test_deepseek_key_alone_chooses_deepseek_chat() -> None:
    settings = resolve_model_settings(env=DEEPSEEK)

    assert (settings.model, settings.source) == ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY")
    assert settings.api_key == Secret("sk-deep")


def test_nothing_configured_falls_back_to_offline_with_a_one_line_notice() -> None:
    settings = resolve_model_settings(env={"TETHER_MODEL": "  ", "DEEPSEEK_API_KEY": ""})

    assert (settings.model, settings.source) == ("offline", "default")
    assert settings.notice == OFFLINE_NOTICE
    assert "\n" not in OFFLINE_NOTICE


def test_provider_alone_takes_its_default_model() -> None:
    assert resolve_model_settings("deepseek", env=DEEPSEEK).model == "deepseek:deepseek-chat"
    anthropic = resolve_model_settings("anthropic", env={"ANTHROPIC_API_KEY": "sk-ant"})
    assert anthropic.model == "anthropic:claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("model", "variables"),
    [
        ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY or TETHER_API_KEY"),
        ("openai:gpt-4.1", "OPENAI_API_KEY or TETHER_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY or TETHER_API_KEY"),
    ],
)
def test_missing_key_is_a_clear_error_naming_the_variables(model: str, variables: str) -> None:
    with pytest.raises(ModelSettingsError) as raised:
        resolve_model_settings(model, env={})
    provider = model.partition(":")[0]
    assert str(raised.value) == (
        f"model {model!r} needs an API key: set {variables}, "
        f"or store one with: tether auth login {provider}"
    )


def test_tether_api_key_serves_any_provider_after_its_own_variable() -> None:
    env = {"TETHER_API_KEY": "sk-generic"}
    assert resolve_model_settings("openai:gpt-4.1", env=env).api_key == Secret("sk-generic")
    env["OPENAI_API_KEY"] = "sk-own"
    assert resolve_model_settings("openai:gpt-4.1", env=env).api_key == Secret("sk-own")


def test_unknown_provider_is_a_clear_error_listing_the_known_ones() -> None:
    with pytest.raises(ModelSettingsError) as raised:
        resolve_model_settings("mistral:large", env={})
    message = str(raised.value)
    assert "unknown model provider 'mistral'" in message
    for known in ("anthropic", "deepseek", "offline", "openai", "openai-compatible"):
        assert known in message


def test_providers_configured_elsewhere_are_accepted_as_they_are() -> None:
    settings = resolve_model_settings("ollama:qwen3", env={}, extra_providers={"ollama"})
    assert (settings.model, settings.api_key) == ("ollama:qwen3", None)


def test_malformed_model_reference_is_a_settings_error() -> None:
    with pytest.raises(ModelSettingsError, match="invalid model reference"):
        resolve_model_settings("Deep Seek", env={})


def test_openai_compatible_needs_a_base_url_and_a_model() -> None:
    with pytest.raises(ModelSettingsError, match=r"needs a base URL.*TETHER_BASE_URL"):
        resolve_model_settings("openai-compatible:qwen3", env={})
    with pytest.raises(ModelSettingsError, match="names no model"):
        resolve_model_settings("openai-compatible", "http://127.0.0.1:8000/v1", env={})


def test_base_url_given_wins_over_the_environment() -> None:
    env = {"TETHER_BASE_URL": "http://127.0.0.1:1/v1"}

    from_env = resolve_model_settings("openai-compatible:qwen3", env=env)
    given = resolve_model_settings("openai-compatible:qwen3", "http://127.0.0.1:2/v1", env=env)

    assert from_env.base_url == "http://127.0.0.1:1/v1"
    assert given.base_url == "http://127.0.0.1:2/v1"
    assert from_env.api_key is None


def test_malformed_base_url_is_an_error() -> None:
    with pytest.raises(ModelSettingsError, match="must start with http"):
        resolve_model_settings("openai-compatible:m", "localhost:8000", env={})


def test_base_url_without_a_model_is_an_error() -> None:
    with pytest.raises(ModelSettingsError, match="no model"):
        resolve_model_settings(None, "http://127.0.0.1:8000/v1", env={})


def test_malformed_key_is_an_error_that_does_not_show_it() -> None:
    with pytest.raises(ModelSettingsError) as raised:
        resolve_model_settings("deepseek", env={"DEEPSEEK_API_KEY": "sk-abc\x07def"})
    assert "DEEPSEEK_API_KEY" in str(raised.value)
    assert "sk-abc" not in str(raised.value)


def test_key_is_masked_in_repr() -> None:
    settings = resolve_model_settings(env=DEEPSEEK)
    assert "sk-deep" not in repr(settings)
    assert "sk-deep" not in repr(settings.rows())


def test_rows_carry_base_url_and_key_to_the_chosen_providers_plugin() -> None:
    settings = resolve_model_settings(
        "openai-compatible:qwen3", "http://127.0.0.1:8000/v1", env={"TETHER_API_KEY": "k"}
    )

    rows = {row["id"]: row for row in settings.rows()}

    assert set(rows) == {"openai", "anthropic", "retry"}
    assert rows["openai"]["plugin"] == "tether.llm.adapters.openai"
    assert rows["openai"]["config"] == {
        "providers": {
            "openai-compatible": {
                "base_url": "http://127.0.0.1:8000/v1",
                "api_key": Secret("k"),
            }
        }
    }
    assert rows["anthropic"]["config"] == {}
    assert rows["retry"]["plugin"] == "tether.loop.retry"


def test_apply_to_merges_into_existing_rows_and_sets_the_loop_model() -> None:
    document = {
        "plugins": [
            {"id": "llm", "plugin": "tether.llm.service"},
            {
                "id": "openai",
                "plugin": "tether.llm.adapters.openai",
                "config": {
                    "read_timeout": 5,
                    "providers": {
                        "ollama": {"base_url": "http://127.0.0.1:11434/v1"},
                        "openai-compatible": {"default_model": "m"},
                    },
                },
            },
            {"id": "agent_loop", "plugin": "tether.loop.plugin", "config": {"model": "offline"}},
        ]
    }
    settings = ModelSettings("openai-compatible:m", "given", base_url="http://127.0.0.1:9/v1")

    patched = settings.apply_to(document)

    rows = {row["id"]: row for row in patched["plugins"]}  # type: ignore[attr-defined]
    assert rows["openai"]["config"] == {
        "read_timeout": 5,
        "providers": {
            "ollama": {"base_url": "http://127.0.0.1:11434/v1"},
            "openai-compatible": {"default_model": "m", "base_url": "http://127.0.0.1:9/v1"},
        },
    }
    assert rows["agent_loop"]["config"] == {
        "model": "openai-compatible:m",
        "base_url": "http://127.0.0.1:9/v1",
    }
    assert {"anthropic", "retry"} <= set(rows)
    assert document["plugins"][2]["config"] == {"model": "offline"}  # type: ignore[index]


def test_the_offline_model_adds_no_adapter_rows() -> None:
    settings = resolve_model_settings(env={})
    assert settings.model == "offline" and settings.rows() == []
    document = {"plugins": [{"id": "agent_loop", "plugin": "tether.loop.plugin"}]}
    patched = settings.apply_to(document)
    assert patched["plugins"] == [  # type: ignore[index]
        {"id": "agent_loop", "plugin": "tether.loop.plugin", "config": {"model": "offline"}}
    ]


def test_a_stored_key_serves_when_the_variable_is_unset_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    write_keys({"deepseek": "sk-stored", "anthropic": "sk-ant-stored"})

    chosen = resolve_model_settings(env={})
    assert (chosen.model, chosen.source) == ("deepseek:deepseek-chat", "stored key")
    assert chosen.api_key == Secret("sk-stored")
    given = resolve_model_settings("anthropic:claude-sonnet-4-5", env={})
    assert given.api_key == Secret("sk-ant-stored")
    assert resolve_model_settings(env=DEEPSEEK).api_key == Secret("sk-deep")
    generic = resolve_model_settings("anthropic:claude-sonnet-4-5", env={"TETHER_API_KEY": "g"})
    assert generic.api_key == Secret("g")
    with pytest.raises(ModelSettingsError, match="needs an API key"):
        resolve_model_settings("openai:gpt-4.1", env={})
