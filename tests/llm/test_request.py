"""Chunk values, model references and requests (tether.llm.chunks, tether.llm.request)."""

from __future__ import annotations

import pytest

from tether.llm import (
    Finish,
    ModelRequest,
    TextBlock,
    ToolCallDelta,
    ToolSpec,
    UserRoleMessage,
    parse_model_ref,
)

BASH = ToolSpec("bash", "Run a command.", {"type": "object"})


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("offline", ("offline", None)),
        ("deepseek:deepseek-chat", ("deepseek", "deepseek-chat")),
        ("ollama:qwen2.5:7b", ("ollama", "qwen2.5:7b")),
        ("open_ai-2:gpt", ("open_ai-2", "gpt")),
    ],
)
def test_model_references_split_into_provider_and_model(
    ref: str, expected: tuple[str, str | None]
) -> None:
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("", "expected 'provider' or 'provider:model'"),
        ("   ", "expected 'provider' or 'provider:model'"),
        (":model", "invalid provider name ''"),
        ("DeepSeek:chat", "invalid provider name 'DeepSeek'"),
        ("deepseek:", "must be non-empty"),
        ("deepseek: chat", "without surrounding spaces"),
    ],
)
def test_bad_model_references_are_a_clear_value_error(ref: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="invalid model reference") as caught:
        parse_model_ref(ref)
    assert fragment in str(caught.value)


def test_a_request_exposes_its_provider_and_model_and_stores_tuples() -> None:
    messages = [UserRoleMessage((TextBlock("hi"),))]
    request = ModelRequest("deepseek:deepseek-chat", messages, tools=[BASH])  # type: ignore[arg-type]
    assert request.provider == "deepseek"
    assert request.model_name == "deepseek-chat"
    assert request.messages == (UserRoleMessage((TextBlock("hi"),)),)
    assert request.tools == (BASH,)
    assert request.tool("bash") is BASH
    assert request.tool("read") is None


@pytest.mark.parametrize(
    ("build", "error", "fragment"),
    [
        (lambda: ModelRequest("bad model", ()), ValueError, "invalid model reference"),
        (lambda: ModelRequest("x", ("hi",)), TypeError, "ModelRequest.messages entries"),  # type: ignore[arg-type]
        (lambda: ModelRequest("x", (), tools=(BASH, BASH)), ValueError, "duplicate names: bash"),
        (lambda: ModelRequest("x", (), max_tokens=0), ValueError, "max_tokens must be positive"),
        (lambda: ModelRequest("x", (), temperature=-1), ValueError, "temperature must be >= 0"),
        (lambda: ToolSpec("", "d", {}), ValueError, "ToolSpec.name"),
        (lambda: ToolSpec("t", "d", []), TypeError, "ToolSpec.parameters"),  # type: ignore[arg-type]
        (lambda: Finish("done"), ValueError, "Finish.reason must be one of"),  # type: ignore[arg-type]
        (lambda: ToolCallDelta(-1, None, None, ""), ValueError, "index must be >= 0"),
    ],
)
def test_bad_values_are_rejected_on_construction(
    build: object, error: type[Exception], fragment: str
) -> None:
    assert callable(build)
    with pytest.raises(error, match=fragment):
        build()
