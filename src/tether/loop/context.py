"""How big a model's context window is, and how much of it a conversation fills.

The window comes from configuration first (``context_windows`` of the agent
loop, keyed by model reference or by model name), then from the defaults
below for common models (matched by the longest prefix of the model name),
then from :data:`FALLBACK_WINDOW`.

Sizes are *estimates*, in tokens: four characters a token for text, tool
calls and tool results, a flat :data:`IMAGE_TOKENS` for an image. They are
computed once per message, when it enters the history
(:class:`~tether.loop.history.History` keeps a running total), so checking a
request against the window costs next to nothing however long the
conversation is. The provider's own count, reported with each answer,
corrects the estimate when it is larger.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.content import (
    AssistantMessage,
    ImageRef,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.catalog import DEFAULT_MODELS, by_longest_prefix
from tether.llm.offline import PROVIDER as OFFLINE
from tether.llm.request import ToolSpec, parse_model_ref
from tether.session.vocabulary import encode_data

__all__ = [
    "DEFAULT_WINDOWS",
    "FALLBACK_WINDOW",
    "IMAGE_TOKENS",
    "context_window",
    "message_tokens",
    "text_tokens",
    "tools_tokens",
    "uncertain_tokens",
]

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1_500
MESSAGE_OVERHEAD = 4
"""Tokens a provider spends on each message's framing (role, separators)."""

FALLBACK_WINDOW = 32_768
"""The window of a model tether knows nothing about: small on purpose, as a
local server's often is. Set ``context_windows`` for such a model."""

DEFAULT_WINDOWS: Mapping[str, int] = {
    # provider-neutral model-name prefixes; the longest match wins
    "claude-": 200_000,
    "deepseek-": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gemini-1.5": 1_048_576,
    "gemini-2": 1_048_576,
    "qwen2.5": 32_768,
    "qwen3": 40_960,
    "llama3": 8_192,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "mistral": 32_768,
}
"""Context windows of common models, in tokens, by model-name prefix."""

_OFFLINE_WINDOW = 1_000_000
"""The offline script reads only the last message: its window never fills."""


def context_window(model: str, overrides: Mapping[str, int] = {}) -> int:
    """The context window, in tokens, of model reference ``model``.

    ``overrides`` (the agent loop's ``context_windows``) is consulted first,
    by the full reference (``"openai-compatible:qwen3:8b"``) then by the model
    name alone (``"qwen3:8b"``); then :data:`DEFAULT_WINDOWS` by the longest
    prefix of the model name, after any ``vendor/`` (as the catalog looks up
    image support); then :data:`FALLBACK_WINDOW`. A bare provider
    reference (``"deepseek"``) stands for that provider's default model.

    Raises:
        ValueError: ``model`` is not a valid model reference.
    """
    provider, name = parse_model_ref(model)
    if model in overrides:
        return overrides[model]
    if name is not None and name in overrides:
        return overrides[name]
    if provider == OFFLINE:
        return _OFFLINE_WINDOW
    name = name or DEFAULT_MODELS.get(provider)
    window = None if name is None else by_longest_prefix(DEFAULT_WINDOWS, name)
    return FALLBACK_WINDOW if window is None else window


def text_tokens(text: str) -> int:
    """The estimated tokens of ``text``."""
    return -(-len(text) // CHARS_PER_TOKEN)


def message_tokens(message: Message) -> int:
    """The estimated tokens ``message`` takes in a request."""
    if isinstance(message, ToolMessage):
        size = MESSAGE_OVERHEAD + text_tokens(message.content) + text_tokens(message.name)
        return size + IMAGE_TOKENS * len(message.images)
    if isinstance(message, SystemMessage):
        return MESSAGE_OVERHEAD + text_tokens(message.text)
    size = MESSAGE_OVERHEAD
    if isinstance(message, UserRoleMessage | AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock | ReasoningBlock):
                size += text_tokens(block.text)
            elif isinstance(block, ToolCallBlock):
                size += text_tokens(block.name) + _json_tokens(block.arguments)
            elif isinstance(block, ImageRef):
                size += IMAGE_TOKENS
    return size


def uncertain_tokens(message: Message) -> int:
    """The part of :func:`message_tokens` a provider may count very differently or not
    at all: reasoning (some drop it from earlier turns) and images (estimated flat)."""
    if isinstance(message, ToolMessage):
        return IMAGE_TOKENS * len(message.images)
    if not isinstance(message, UserRoleMessage | AssistantMessage):
        return 0
    size = 0
    for block in message.content:
        if isinstance(block, ReasoningBlock):
            size += text_tokens(block.text)
        elif isinstance(block, ImageRef):
            size += IMAGE_TOKENS
    return size


def tools_tokens(tools: tuple[ToolSpec, ...]) -> int:
    """The estimated tokens the tool definitions take in a request."""
    return sum(
        text_tokens(tool.name) + text_tokens(tool.description) + _json_tokens(tool.parameters)
        for tool in tools
    )


def _json_tokens(value: object) -> int:
    try:
        return -(-len(encode_data(value)) // CHARS_PER_TOKEN)
    except (TypeError, ValueError, NotImplementedError):
        return text_tokens(str(value))
