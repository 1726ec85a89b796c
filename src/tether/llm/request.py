"""What the agent loop asks a model: the request value and the model reference.

A model is named by a **model reference**: ``"provider"`` (the provider's
default model) or ``"provider:model"``. The provider part picks the adapter
registered under that name; the model part is passed to it untouched, so it
may itself contain colons (``"ollama:qwen2.5:7b"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec
from msgspec.structs import force_setattr

from tether.content import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    ToolSpec,
    UserRoleMessage,
)

__all__ = ["ModelRequest", "ToolSpec", "check_provider_name", "parse_model_ref"]

_PROVIDER = re.compile(r"[a-z][a-z0-9_-]*")
_MESSAGE_TYPES = (SystemMessage, UserRoleMessage, AssistantMessage, ToolMessage)


def check_provider_name(name: str) -> str:
    """Return ``name`` if it is a valid provider name (``[a-z][a-z0-9_-]*``).

    Raises:
        ValueError: it is not.
    """
    if not isinstance(name, str) or not _PROVIDER.fullmatch(name):
        raise ValueError(
            f"invalid provider name {name!r}: use lower-case letters, digits, '-' and '_', "
            "starting with a letter"
        )
    return name


def parse_model_ref(ref: str) -> tuple[str, str | None]:
    """Split a model reference into ``(provider, model)``; ``model`` is ``None`` for ``"provider"``.

    Raises:
        ValueError: ``ref`` is empty, has an invalid provider name, or ends in
            ``":"`` with no model after it.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError(
            f"invalid model reference {ref!r}: expected 'provider' or 'provider:model'"
        )
    provider, colon, model = ref.partition(":")
    try:
        check_provider_name(provider)
    except ValueError as exc:
        raise ValueError(f"invalid model reference {ref!r}: {exc}") from None
    if not colon:
        return provider, None
    if not model.strip() or model != model.strip():
        raise ValueError(
            f"invalid model reference {ref!r}: the model after {provider + ':'!r} "
            "must be non-empty, without surrounding spaces"
        )
    return provider, model


class ModelRequest(msgspec.Struct, frozen=True):
    """One request to a model.

    ``model`` is a model reference (see :func:`parse_model_ref`). ``system`` is
    the system prompt, kept apart from ``messages`` because providers place it
    differently. ``max_tokens`` and ``temperature`` are ``None`` for the
    adapter's defaults. Sequences are stored as tuples.

    Raises:
        ValueError: ``model`` is not a valid model reference, two tools share a
            name, ``max_tokens`` is not positive or ``temperature`` is negative.
        TypeError: an entry of ``messages`` or ``tools`` has the wrong type.
    """

    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None

    def __post_init__(self) -> None:
        parse_model_ref(self.model)
        force_setattr(self, "messages", _entries("messages", self.messages, _MESSAGE_TYPES))
        force_setattr(self, "tools", _entries("tools", self.tools, (ToolSpec,)))
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            duplicates = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"ModelRequest.tools has duplicate names: {', '.join(duplicates)}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"ModelRequest.max_tokens must be positive, got {self.max_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"ModelRequest.temperature must be >= 0, got {self.temperature}")

    @property
    def provider(self) -> str:
        """The provider part of :attr:`model`."""
        return parse_model_ref(self.model)[0]

    @property
    def model_name(self) -> str | None:
        """The model part of :attr:`model`, or ``None`` for the provider's default."""
        return parse_model_ref(self.model)[1]

    def tool(self, name: str) -> ToolSpec | None:
        """The tool called ``name`` among :attr:`tools`, or ``None``."""
        return next((tool for tool in self.tools if tool.name == name), None)


def _entries(name: str, value: object, allowed: tuple[type, ...]) -> tuple[object, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"ModelRequest.{name} must be a sequence, got {value!r}")
    entries = tuple(value)
    # Every request carries the whole conversation: entries of exactly the
    # allowed classes are recognized at C speed; only others (subclasses, or
    # the wrong types) are checked one by one.
    if frozenset(allowed).issuperset(map(type, entries)):
        return entries
    for entry in entries:
        if not isinstance(entry, allowed):
            kinds = " or ".join(kind.__name__ for kind in allowed)
            raise TypeError(f"ModelRequest.{name} entries must be {kinds}, got {entry!r}")
    return entries
