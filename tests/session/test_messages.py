"""Model-facing message values (tether.content)."""

from __future__ import annotations

import pytest

from tether.llm import (
    AssistantMessage,
    ImageRef,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)


def test_messages_are_frozen_values() -> None:
    message = UserRoleMessage((TextBlock("hi"),))
    with pytest.raises(AttributeError):
        message.content = ()  # type: ignore[misc]
    assert message == UserRoleMessage((TextBlock("hi"),))
    assert hash(message) == hash(UserRoleMessage((TextBlock("hi"),)))


def test_content_sequences_are_stored_as_tuples() -> None:
    blocks = [TextBlock("a"), ImageRef("https://example.com/a.png", "image/png")]
    message = UserRoleMessage(blocks)  # type: ignore[arg-type]
    blocks.clear()
    assert message.content == (TextBlock("a"), ImageRef("https://example.com/a.png", "image/png"))


def test_assistant_message_lists_its_tool_calls() -> None:
    call = ToolCallBlock("c1", "bash", {"command": "ls"})
    message = AssistantMessage((ReasoningBlock("think", "sig"), TextBlock("ok"), call))
    assert message.tool_calls == (call,)
    assert message.interrupted is False


def test_tool_call_blocks_hash_despite_their_arguments_mapping() -> None:
    assert hash(ToolCallBlock("c1", "bash", {"a": 1})) == hash(
        ToolCallBlock("c1", "bash", {"a": 2})
    )


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: TextBlock(3), "TextBlock.text must be str"),
        (lambda: ImageRef("u", 5), "ImageRef.mime_type must be str or None"),
        (lambda: ReasoningBlock("t", 1), "ReasoningBlock.signature must be str or None"),
        (lambda: ToolCallBlock("c", "n", ["x"]), "ToolCallBlock.arguments must be Mapping"),
        (lambda: SystemMessage(None), "SystemMessage.text must be str"),
        (lambda: UserRoleMessage("hello"), "UserRoleMessage.content must be a sequence of blocks"),
        (
            lambda: UserRoleMessage((ReasoningBlock("x"),)),
            "UserRoleMessage.content entries must be",
        ),
        (lambda: AssistantMessage((ImageRef("u"),)), "AssistantMessage.content entries must be"),
        (lambda: AssistantMessage((), interrupted=1), "AssistantMessage.interrupted must be bool"),
        (lambda: ToolMessage("c", "n", "out", "no"), "ToolMessage.is_error must be bool"),
    ],
)
def test_fields_are_type_checked_on_construction(build: object, fragment: str) -> None:
    assert callable(build)
    with pytest.raises(TypeError, match=fragment):
        build()
