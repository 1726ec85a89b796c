"""Which model a start picks, and where each named provider's API key comes from.

The one table of the key variables, and the one precedence of the model
choice, read by :mod:`tether.llm.adapters.providers` and
:mod:`tether.llm.adapters.settings` (which check and apply them) and by
``tether acp``'s handshake (which tells an editor what to set, see
:mod:`tether.acp.auth`) — before anything heavy is imported, so this module
imports only the standard library.

The model, first match wins: the one given (``--model``), ``TETHER_MODEL``,
:data:`DEFAULT_MODEL` when :data:`DEFAULT_KEY_ENV` is set, else none (the
offline model). A key is read from the provider's own variable, then from
:data:`GENERIC_KEY_ENV` (an empty variable counts as unset), then from the
keys ``tether auth login`` stored (:mod:`tether.credentials`) — that file is
read only when no variable has the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

__all__ = [
    "DEFAULT_KEY_ENV",
    "DEFAULT_MODEL",
    "GENERIC_KEY_ENV",
    "KEYS",
    "MODEL_ENV",
    "STORED",
    "ModelSource",
    "ProviderKey",
    "choose_model",
    "default_provider",
    "find_key",
    "provider_key",
    "provider_of",
]

GENERIC_KEY_ENV = "TETHER_API_KEY"
"""Read for every provider after the provider's own variable."""

MODEL_ENV = "TETHER_MODEL"
DEFAULT_KEY_ENV = "DEEPSEEK_API_KEY"
DEFAULT_MODEL = "deepseek:deepseek-chat"

STORED = "the key stored by tether auth login"
"""Where :func:`provider_key` says a stored key came from."""

ModelSource = Literal["given", "TETHER_MODEL", "DEEPSEEK_API_KEY", "stored key", "default"]
"""Where the model choice came from, by the precedence above."""


class ProviderKey(NamedTuple):
    """The key of one named provider that needs one."""

    label: str
    """The provider's name as people write it (``"DeepSeek"``)."""
    variables: tuple[str, ...]
    """The provider's own key variables (:data:`GENERIC_KEY_ENV` is read after them)."""
    link: str
    """Where a person gets a key."""

    @property
    def key_variables(self) -> tuple[str, ...]:
        """Every variable the key is read from, in order (:data:`GENERIC_KEY_ENV` last)."""
        return (*self.variables, GENERIC_KEY_ENV)


KEYS: Mapping[str, ProviderKey] = {
    "deepseek": ProviderKey(
        "DeepSeek", ("DEEPSEEK_API_KEY",), "https://platform.deepseek.com/api_keys"
    ),
    "openai": ProviderKey("OpenAI", ("OPENAI_API_KEY",), "https://platform.openai.com/api-keys"),
    "anthropic": ProviderKey(
        "Anthropic", ("ANTHROPIC_API_KEY",), "https://console.anthropic.com/settings/keys"
    ),
}
"""The named providers whose requests need a key, by provider name."""


def find_key(variables: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, str] | None:
    """The first of ``variables`` set (non-blank) in ``env``, and its value, stripped."""
    for variable in variables:
        value = env.get(variable, "").strip()
        if value:
            return variable, value
    return None


def provider_key(
    provider: str, variables: tuple[str, ...], env: Mapping[str, str]
) -> tuple[str, str] | None:
    """Where the key of ``provider`` comes from and the key, or ``None`` without one.

    The first of ``variables`` set in ``env`` (:func:`find_key`); else the key
    stored for ``provider`` (where: :data:`STORED`), read from the credentials
    file now — only then, so a start with the variable set reads no file.

    Raises:
        tether.credentials.CredentialsError: the variables are unset and the
            credentials file is damaged or unreadable.
    """
    found = find_key(variables, env)
    if found is not None:
        return found
    from tether.credentials import read_keys

    stored = read_keys().get(provider, "").strip()
    return (STORED, stored) if stored else None


def choose_model(model: str | None, env: Mapping[str, str]) -> tuple[str | None, ModelSource]:
    """The model reference a start uses (``None``: none is configured) and its source.

    ``model`` is the one given (``None`` or blank: not given). With no model
    given or set, a DeepSeek key stored by ``tether auth login`` picks
    :data:`DEFAULT_MODEL` as :data:`DEFAULT_KEY_ENV` does.

    Raises:
        tether.credentials.CredentialsError: the credentials file had to be
            read and is damaged or unreadable.
    """
    if model is not None and model.strip():
        return model.strip(), "given"
    from_env = env.get(MODEL_ENV, "").strip()
    if from_env:
        return from_env, "TETHER_MODEL"
    found = provider_key("deepseek", (DEFAULT_KEY_ENV,), env)
    if found is not None:
        return DEFAULT_MODEL, "stored key" if found[0] == STORED else "DEEPSEEK_API_KEY"
    return None, "default"


def default_provider(model: str | None, env: Mapping[str, str]) -> str:
    """The provider of the model a start with ``model`` uses (:func:`choose_model`),
    or of :data:`DEFAULT_MODEL` when none is configured.

    Raises:
        tether.credentials.CredentialsError: as :func:`choose_model`.
    """
    return provider_of(choose_model(model, env)[0])


def provider_of(ref: str | None) -> str:
    """The provider of the model reference ``ref`` (of :data:`DEFAULT_MODEL` for ``None``)."""
    return (ref or DEFAULT_MODEL).partition(":")[0]
