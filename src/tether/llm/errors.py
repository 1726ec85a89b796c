"""Errors raised by the LLM seam. All derive from `LlmError`."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LlmError", "ProviderConflictError", "UnknownProviderError"]


class LlmError(Exception):
    """Base class of every error raised by `tether.llm`."""


class UnknownProviderError(LlmError, LookupError):
    """No adapter is registered under the provider a model reference names.

    ``known`` lists the providers registered when the lookup failed.
    """

    def __init__(self, provider: str, known: Iterable[str]) -> None:
        self.provider = provider
        self.known = tuple(sorted(known))
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"unknown model provider {provider!r} (registered providers: {listed})")


class ProviderConflictError(LlmError):
    """An adapter is already registered under this provider name."""
