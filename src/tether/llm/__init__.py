"""The LLM seam: model-facing messages (and, later, stream chunks and adapters)."""

from tether.llm.messages import (
    AssistantBlock,
    AssistantMessage,
    ImageRef,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserBlock,
    UserMessage,
)

__all__ = [
    "AssistantBlock",
    "AssistantMessage",
    "ImageRef",
    "Message",
    "ReasoningBlock",
    "SystemMessage",
    "TextBlock",
    "ToolCallBlock",
    "ToolMessage",
    "UserBlock",
    "UserMessage",
]
