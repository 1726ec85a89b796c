"""The models tether knows about: their context windows and prices, from settings.

The ``llm`` service's configuration (the ``llm`` row of a composition) names
models by their reference, each with what a client may want to show::

    plugins:
      - id: llm
        config:
          models:
            "deepseek:deepseek-chat":
              name: DeepSeek Chat
              context_window: 131072
              prices: {input: 0.27, output: 1.10, cached_input: 0.07}

Prices are per million tokens, in ``currency`` (``USD`` unless set).
``images`` says whether the model accepts images (in prompts and in tool
results, such as a ``read`` of a PNG); unset, :meth:`ModelCatalog.accepts_images`
answers from :data:`IMAGE_MODELS`, tether's defaults for common models.
:meth:`Prices.cost` prices one request's usage figures (as stored in
``assistant/message``): cached input at ``cached_input`` and cache writes at
``cache_creation`` when those are set, else at ``input``; output (reasoning
included) at ``output``. Nothing here is guessed: a model the settings do not
list has no context window and no price.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta

from tether.runtime.schema import FieldError, Schema

__all__ = [
    "DEFAULT_MODELS",
    "IMAGE_MODELS",
    "ModelCatalog",
    "ModelEntry",
    "Prices",
    "by_longest_prefix",
]

V = TypeVar("V")

PER_TOKENS = 1_000_000
"""Prices are per this many tokens."""


class Prices(Schema, frozen=True):
    """What a model costs, per million tokens."""

    input: Annotated[float, Meta(ge=0, description="per million input tokens")]
    output: Annotated[float, Meta(ge=0, description="per million output tokens")]
    cached_input: (
        Annotated[float, Meta(ge=0, description="per million input tokens read from the cache")]
        | None
    ) = None
    cache_creation: (
        Annotated[float, Meta(ge=0, description="per million input tokens written to the cache")]
        | None
    ) = None
    currency: Annotated[str, Meta(description="ISO 4217 code")] = "USD"

    def __post_init__(self) -> None:
        if len(self.currency) != 3 or not self.currency.isalpha() or not self.currency.isupper():
            raise FieldError(("currency",), f"must be an ISO 4217 code, got {self.currency!r}")

    def cost(self, usage: Mapping[str, int]) -> float:
        """The price of one request that used ``usage`` (``assistant/message`` figures)."""
        prompt = usage.get("input_tokens", 0)
        cached = usage.get("cached_input_tokens", 0)
        written = usage.get("cache_creation_input_tokens", 0)
        fresh = max(0, prompt - cached - written)
        cached_price = self.input if self.cached_input is None else self.cached_input
        written_price = self.input if self.cache_creation is None else self.cache_creation
        total = (
            fresh * self.input
            + cached * cached_price
            + written * written_price
            + usage.get("output_tokens", 0) * self.output
        )
        return total / PER_TOKENS


class ModelEntry(Schema, frozen=True):
    """One model of the catalog."""

    name: Annotated[str, Meta(description="the label a client shows")] | None = None
    description: str | None = None
    context_window: (
        Annotated[int, Meta(ge=1, description="the model's context window, in tokens")] | None
    ) = None
    prices: Prices | None = None
    images: (
        Annotated[
            bool,
            Meta(description="whether the model accepts images; unset: tether's default"),
        ]
        | None
    ) = None


DEFAULT_MODELS: Mapping[str, str] = {
    "deepseek": "deepseek-chat",
    "openai": "gpt-4.1",
    "anthropic": "claude-sonnet-4-5",
}
"""The model a bare provider reference (``--model anthropic``) stands for."""

IMAGE_MODELS: Mapping[str, bool] = {
    # provider-neutral model-name prefixes; the longest match wins
    "claude-": True,
    "claude-2": False,
    "claude-instant": False,
    "gpt-4o": True,
    "gpt-4.1": True,
    "gpt-4-turbo": True,
    "gpt-5": True,
    "o1": True,
    "o1-mini": False,
    "o3": True,
    "o3-mini": False,
    "o4-mini": True,
    "gemini-": True,
    "llama3.2-vision": True,
    "qwen2.5vl": True,
    "qwen2.5-vl": True,
    "llava": True,
}
"""Which common models accept images, by model-name prefix; a model no prefix
matches does not (DeepSeek's chat models, most local ones)."""

_SCRIPTED = "offline"
"""The scripted model: it accepts images (it reports what it was sent)."""


def by_longest_prefix(table: Mapping[str, V], name: str) -> V | None:
    """The value of the longest key of ``table`` that model name ``name`` starts
    with, after any ``vendor/`` (a router's names carry the vendor:
    ``anthropic/claude-sonnet-4.5``); ``None`` when none does."""
    name = name.rpartition("/")[2]
    best = max((prefix for prefix in table if name.startswith(prefix)), key=len, default=None)
    return None if best is None else table[best]


class ModelCatalog(msgspec.Struct, frozen=True):
    """Known models by reference, in the order the settings list them."""

    models: Mapping[str, ModelEntry] = msgspec.field(default_factory=dict)

    def get(self, model: str) -> ModelEntry | None:
        """The entry of ``model``, or ``None`` when the settings do not list it."""
        return self.models.get(model)

    def label(self, model: str) -> str:
        """What a client shows for ``model``: its configured name, else the reference."""
        entry = self.models.get(model)
        return model if entry is None or entry.name is None else entry.name

    def accepts_images(self, model: str) -> bool:
        """Whether ``model`` (a model reference) accepts images.

        Its entry's ``images`` when set; else :data:`IMAGE_MODELS` by the
        longest prefix of the model name, after any ``vendor/`` (a bare
        provider reference stands for its default model,
        :data:`DEFAULT_MODELS`); else no. The offline model accepts them.
        """
        entry = self.models.get(model)
        if entry is not None and entry.images is not None:
            return entry.images
        provider, _, name = model.partition(":")
        if provider == _SCRIPTED:
            return True
        name = name or DEFAULT_MODELS.get(provider, "")
        entry = self.models.get(name)
        if entry is not None and entry.images is not None:
            return entry.images
        return by_longest_prefix(IMAGE_MODELS, name) or False

    def choices(self, current: str) -> tuple[str, ...]:
        """The models a picker offers: ``current`` first, then the catalog's others."""
        return (current, *(model for model in self.models if model != current))
