"""The providers tether knows by name: where they live and where their keys come from.

One table serves both the adapter plugins (their default configuration) and
:func:`tether.llm.adapters.settings.resolve_model_settings` (which checks a
model choice before anything starts), so the two never disagree.

Keys are read from the provider's own variable first, then from
``TETHER_API_KEY``; an empty variable counts as unset. The variables
themselves are :data:`tether.provider_keys.KEYS`'s (which ``tether acp``
reads before this package is imported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from tether.masking import mask_credentials
from tether.provider_keys import GENERIC_KEY_ENV, KEYS, find_key

__all__ = [
    "ANTHROPIC_PLUGIN",
    "GENERIC_KEY_ENV",
    "OPENAI_PLUGIN",
    "PRESETS",
    "Preset",
    "find_key",
]

OPENAI_PLUGIN = "tether.llm.adapters.openai"
ANTHROPIC_PLUGIN = "tether.llm.adapters.anthropic"

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class Preset(msgspec.Struct, frozen=True):
    """What tether assumes about one named provider until configured otherwise.

    ``base_url`` ends with the API version path when the provider uses one
    (``https://api.openai.com/v1``); ``None`` means the user must give one.
    ``key_env`` lists the provider's own key variables. ``replay_reasoning``
    sends ``reasoning_content`` back on assistant messages that called tools
    (DeepSeek rejects the follow-up request otherwise). ``parallel_tool_calls``
    asks for several tool calls per answer where the provider documents the
    field (llama.cpp's server makes one call per answer without it).
    """

    provider: str
    plugin: str
    row: str
    base_url: str | None
    key_env: tuple[str, ...]
    key_required: bool
    default_model: str | None
    replay_reasoning: bool = False
    max_tokens_field: MaxTokensField = "max_tokens"
    parallel_tool_calls: bool = False
    text_tool_calls: bool | None = None
    """Read tool calls written as text (:mod:`~.text_calls`); ``None``: only for a
    base URL on this machine."""

    @property
    def key_variables(self) -> tuple[str, ...]:
        """Every variable a key is read from, in order."""
        return (*self.key_env, GENERIC_KEY_ENV)


PRESETS: Mapping[str, Preset] = {
    preset.provider: preset
    for preset in (
        Preset(
            "deepseek",
            OPENAI_PLUGIN,
            "openai",
            base_url="https://api.deepseek.com",
            key_env=KEYS["deepseek"].variables,
            key_required=True,
            default_model="deepseek-chat",
            replay_reasoning=True,
        ),
        Preset(
            "openai",
            OPENAI_PLUGIN,
            "openai",
            base_url="https://api.openai.com/v1",
            key_env=KEYS["openai"].variables,
            key_required=True,
            default_model="gpt-4.1",
            max_tokens_field="max_completion_tokens",
            parallel_tool_calls=True,
        ),
        Preset(
            "openai-compatible",
            OPENAI_PLUGIN,
            "openai",
            base_url=None,
            key_env=(),
            key_required=False,
            default_model=None,
            replay_reasoning=True,
            parallel_tool_calls=True,
        ),
        Preset(
            "anthropic",
            ANTHROPIC_PLUGIN,
            "anthropic",
            base_url="https://api.anthropic.com/v1",
            key_env=KEYS["anthropic"].variables,
            key_required=True,
            default_model="claude-sonnet-4-5",
        ),
    )
}
"""The named providers, by provider name."""


def check_key(key: str, where: str) -> str | None:
    """Why ``key`` cannot be sent in a header, or ``None`` if it can.

    The reason names ``where`` the key came from, never the key.
    """
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        return f"the API key from {where} contains spaces, control or non-ASCII characters"
    return None


def check_base_url(url: str) -> str | None:
    """Why ``url`` is not a usable base URL, or ``None`` if it is."""
    if not url.startswith(("http://", "https://")) or len(url) <= len("https://"):
        return f"base URL {mask_credentials(url)!r} must start with http:// or https://"
    return None
