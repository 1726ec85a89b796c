"""Which model to use, decided once, before anything starts.

:func:`resolve_model_settings` applies the precedence, first match wins:

1. the model given (the command line's ``--model``, else the configuration's);
2. ``TETHER_MODEL`` from the environment;
3. ``deepseek:deepseek-chat`` when ``DEEPSEEK_API_KEY`` is set, or a DeepSeek
   key is stored (``tether auth login``);
4. the offline model (a script, not an LLM), with a one-line
   :attr:`ModelSettings.notice` for the command to print on stderr.

The base URL is the one given (``--base-url``), else ``TETHER_BASE_URL``,
else the provider's default. It includes the API version path when the
provider has one (``http://127.0.0.1:8000/v1``). The key comes from the
provider's variable (``DEEPSEEK_API_KEY``, ``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``), then ``TETHER_API_KEY``, then the key ``tether auth
login`` stored for the provider (:func:`tether.provider_keys.provider_key`).

Every problem — an unknown provider, a missing key, a model reference
without a model where the provider has no default, a missing or malformed
base URL — raises :class:`ModelSettingsError` with a message that says what
to set. Messages never contain a key.

The command then composes with :meth:`ModelSettings.apply_to` (or the
simpler :meth:`ModelSettings.overlay`), which adds the adapter and retry
rows and points the agent loop at the model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import cast

import msgspec

from tether.credentials import CredentialsError
from tether.fence import environ
from tether.llm.adapters.providers import (
    ANTHROPIC_PLUGIN,
    OPENAI_PLUGIN,
    PRESETS,
    Preset,
    check_base_url,
    check_key,
)
from tether.llm.errors import LlmError
from tether.llm.request import parse_model_ref
from tether.provider_keys import KEYS, MODEL_ENV, ModelSource, choose_model, provider_key
from tether.runtime.schema import Secret

__all__ = [
    "AGENT_LOOP_ROW",
    "BASE_URL_ENV",
    "MODEL_ENV",
    "OFFLINE_NOTICE",
    "RETRY_PLUGIN",
    "ModelSettings",
    "ModelSettingsError",
    "ModelSource",
    "resolve_model_settings",
]

BASE_URL_ENV = "TETHER_BASE_URL"
OFFLINE = "offline"
RETRY_PLUGIN = "tether.loop.retry"
AGENT_LOOP_ROW = "agent_loop"

OFFLINE_NOTICE = (
    "tether: no model configured (--model, TETHER_MODEL or DEEPSEEK_API_KEY); "
    "using the offline model, a script and not an LLM"
)


class ModelSettingsError(LlmError, ValueError):
    """The model choice cannot work; the message says what to set."""


class ModelSettings(msgspec.Struct, frozen=True):
    """A checked model choice.

    ``model`` is a full model reference (``"deepseek:deepseek-chat"``, or
    ``"offline"``). ``base_url`` is set only when it overrides the provider's
    default. ``api_key`` is masked in every ``repr``.
    """

    model: str
    source: ModelSource
    base_url: str | None = None
    api_key: Secret | None = None
    notice: str | None = None
    """A line to print on stderr (the offline fallback), or ``None``."""

    @property
    def provider(self) -> str:
        return parse_model_ref(self.model)[0]

    def rows(self) -> list[dict[str, object]]:
        """The composition rows the choice needs: both adapter plugins and the retry policy.

        The row of the chosen provider's plugin carries its base URL and key
        (as a :class:`~tether.runtime.schema.Secret`), when they were resolved
        here. The offline model needs none of them, so none are added for it
        (nothing network-related is imported); a composition that still wants
        them lists them itself.
        """
        if self.provider == OFFLINE:
            return []
        openai: dict[str, object] = {}
        anthropic: dict[str, object] = {}
        overrides: dict[str, object] = {}
        if self.base_url is not None:
            overrides["base_url"] = self.base_url
        if self.api_key is not None:
            overrides["api_key"] = self.api_key
        preset = PRESETS.get(self.provider)
        if overrides and preset is not None:
            if preset.plugin == OPENAI_PLUGIN:
                openai["providers"] = {self.provider: overrides}
            else:
                anthropic.update(overrides)
        return [
            {"id": "openai", "plugin": OPENAI_PLUGIN, "config": openai},
            {"id": "anthropic", "plugin": ANTHROPIC_PLUGIN, "config": anthropic},
            {"id": "retry", "plugin": RETRY_PLUGIN},
        ]

    def overlay(self) -> dict[str, object]:
        """:meth:`rows` as a composition overlay (``{"plugins": [...]}``).

        An overlay replaces a row's config whole; to keep settings an earlier
        document gave these rows, use :meth:`apply_to`.
        """
        return {"plugins": self.rows()}

    def apply_to(self, document: Mapping[str, object]) -> dict[str, object]:
        """``document`` (a raw composition) set up for this choice: :meth:`with_rows`,
        and the ``agent_loop`` row's ``model`` set (and its ``base_url``, when one
        was given, so new sessions record it). ``document`` is not changed."""
        composed = self.with_rows(document)
        rows = cast(list[dict[str, object]], composed["plugins"])
        loop = next((row for row in rows if row.get("id") == AGENT_LOOP_ROW), None)
        if loop is not None:
            config = {**_mapping(loop.get("config")), "model": self.model}
            config.pop("base_url", None)
            if self.base_url is not None:
                config["base_url"] = self.base_url
            loop["config"] = config
        return composed

    def with_rows(self, document: Mapping[str, object]) -> dict[str, object]:
        """``document`` with the rows of :meth:`rows`, its ``agent_loop`` row as it
        is: the model's provider can be used, and the agents keep their model.

        Rows of :meth:`rows` that ``document`` lacks are added; where it has
        one, the settings are merged into its config (``providers`` entries
        key by key). ``document`` is not changed.
        """
        raw = document.get("plugins")
        rows = (
            [dict(row) for row in raw if isinstance(row, Mapping)] if isinstance(raw, list) else []
        )
        by_id = {row.get("id"): row for row in rows}
        for wanted in self.rows():
            row = by_id.get(wanted["id"])
            if row is None:
                rows.append(wanted)
                continue
            row["config"] = _merged(_mapping(row.get("config")), _mapping(wanted.get("config")))
        return {**document, "plugins": rows}


def _merged(config: Mapping[str, object], wanted: Mapping[str, object]) -> dict[str, object]:
    """``config`` with ``wanted`` over it, ``providers`` entries merged key by key."""
    merged = dict(config)
    for key, value in wanted.items():
        if key == "providers":
            providers = dict(_mapping(merged.get("providers")))
            for provider, extra in _mapping(value).items():
                providers[provider] = {**_mapping(providers.get(provider)), **_mapping(extra)}
            merged["providers"] = providers
        else:
            merged[key] = value
    return merged


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def resolve_model_settings(
    model: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    extra_providers: Collection[str] = (),
) -> ModelSettings:
    """Decide the model; see the module docstring for the precedence.

    ``model`` and ``base_url`` are what the configuration or the command line
    gave (``None`` or blank: not given). ``extra_providers`` names providers
    configured in the composition beyond the built-in ones; they are accepted
    as they are (their rows hold their settings).

    Raises:
        ModelSettingsError: the model reference is malformed, its provider is
            unknown, its key is missing or malformed, it needs a base URL or a
            model name that nothing gives, or ``base_url`` is malformed or
            given for a provider that takes none, or the stored keys had to
            be read and their file is damaged.
    """
    if env is None:
        env = environ()
    try:
        return _resolve(model, base_url, extra_providers, env)
    except CredentialsError as exc:
        raise ModelSettingsError(str(exc)) from None


def _resolve(
    model: str | None,
    base_url: str | None,
    extra_providers: Collection[str],
    env: Mapping[str, str],
) -> ModelSettings:
    given_url = _given(base_url)
    ref, source = choose_model(model, env)
    if ref is None:
        if given_url is not None:
            raise ModelSettingsError(
                "a base URL was given but no model: pass --model PROVIDER:MODEL too"
            )
        return ModelSettings(OFFLINE, "default", notice=OFFLINE_NOTICE)
    try:
        provider, name = parse_model_ref(ref)
    except ValueError as exc:
        raise ModelSettingsError(str(exc)) from None
    if provider == OFFLINE or provider in extra_providers:
        if given_url is not None:
            raise ModelSettingsError(
                f"provider {provider!r} takes no --base-url here; configure it in its row"
            )
        return ModelSettings(ref, source)
    preset = PRESETS.get(provider)
    if preset is None:
        known = sorted({*PRESETS, OFFLINE, *extra_providers})
        raise ModelSettingsError(
            f"unknown model provider {provider!r} in {ref!r}; known providers: {', '.join(known)}"
        )
    url = given_url or _given(env.get(BASE_URL_ENV))
    if url is not None:
        problem = check_base_url(url)
        if problem is not None:
            raise ModelSettingsError(problem)
    elif preset.base_url is None:
        raise ModelSettingsError(
            f"model {ref!r} needs a base URL: pass --base-url or set {BASE_URL_ENV} "
            "(up to the API version, e.g. http://127.0.0.1:8000/v1)"
        )
    model_name = name or preset.default_model
    if model_name is None:
        raise ModelSettingsError(
            f"model {ref!r} names no model and {provider!r} has no default: use {provider}:MODEL"
        )
    return ModelSettings(
        f"{provider}:{model_name}",
        source,
        base_url=url,
        api_key=_key(preset, ref, env),
    )


def _key(preset: Preset, ref: str, env: Mapping[str, str]) -> Secret | None:
    found = provider_key(preset.provider, preset.key_variables, env)
    if found is not None:
        variable, key = found
        problem = check_key(key, variable)
        if problem is not None:
            raise ModelSettingsError(problem)
        return Secret(key)
    if preset.key_required:
        login = f", or store one with: tether auth login {preset.provider}"
        raise ModelSettingsError(
            f"model {ref!r} needs an API key: set {' or '.join(preset.key_variables)}"
            + (login if preset.provider in KEYS else "")
        )
    return None


def _given(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None
