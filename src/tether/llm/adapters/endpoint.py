"""Where an adapter sends a provider's requests, and with which key.

Shared by the adapter plugins:

* :class:`EndpointConfig` and :class:`HttpConfig` — the configuration fields
  every provider and every adapter plugin has;
* :func:`resolve_endpoint` — a :class:`~.providers.Preset` with configuration
  applied and its key found, or the reason it cannot be used.

An endpoint that cannot be used (no key where one is required, no base URL)
is still registered: its requests end at once with an ``auth`` or
``bad-request`` error that says what to set, instead of the provider being
unknown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from tether.llm.adapters.errors import ProviderError
from tether.llm.adapters.http import HttpOptions
from tether.llm.adapters.providers import (
    GENERIC_KEY_ENV,
    Preset,
    check_base_url,
    check_key,
    find_key,
)

__all__ = [
    "Endpoint",
    "EndpointConfig",
    "HttpConfig",
    "resolve_endpoint",
]


class HttpConfig(BaseModel):
    """Timeouts (seconds) and pool size of an adapter plugin's HTTP client."""

    # The schema is built when a plugin mounts and validates its config, not
    # when the module is imported: it keeps the adapters' import cheap.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    connect_timeout: float = Field(default=10.0, gt=0, description="seconds to connect")
    read_timeout: float = Field(
        default=120.0, gt=0, description="seconds to wait for the next bytes of an answer"
    )
    max_connections: int = Field(default=20, ge=1, description="pooled connections")

    def http_options(self) -> HttpOptions:
        return HttpOptions(
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_connections=self.max_connections,
        )


class EndpointConfig(BaseModel):
    """Settings of one provider; a field left ``None`` keeps the preset's value.

    Prefer ``api_key_env`` (the variables a key is read from) to ``api_key``:
    a key written in a composition file is a key on disk.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    base_url: str | None = Field(
        default=None, description="the API root, up to and including its version path"
    )
    api_key: SecretStr | None = None
    api_key_env: list[str] | None = Field(
        default=None, description=f"variables to read the key from ({GENERIC_KEY_ENV} follows)"
    )
    key_required: bool | None = None
    default_model: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A provider ready to be called, or the reason it cannot be.

    ``api_key`` is kept out of ``repr``; read it with ``get_secret_value()``
    only to build a request header.
    """

    preset: Preset
    api_key: SecretStr | None = field(default=None, repr=False)
    problem: ProviderError | None = None

    @property
    def provider(self) -> str:
        return self.preset.provider

    @property
    def secret(self) -> str | None:
        return None if self.api_key is None else self.api_key.get_secret_value()

    def url(self, path: str) -> str:
        """``base_url`` joined with ``path`` (``"/chat/completions"``)."""
        base = self.preset.base_url
        assert base is not None, "an endpoint without a base URL has a problem"
        return base.rstrip("/") + path

    def model(self, model_name: str | None) -> str:
        """The model to ask: the reference's, else the preset's default.

        Raises:
            ProviderError: there is neither (``bad-request``).
        """
        model = model_name or self.preset.default_model
        if model is None:
            raise ProviderError(
                "bad-request",
                f"{self.provider}: no model named: use a model reference such as "
                f"'{self.provider}:MODEL'",
            )
        return model


def resolve_endpoint(
    preset: Preset, config: EndpointConfig | None, env: Mapping[str, str]
) -> Endpoint:
    """``preset`` with ``config`` applied and its key looked up in ``env``."""
    overrides: dict[str, object] = {}
    if config is not None:
        # Any field of the config that a preset has too (subclasses add some).
        for name in type(config).model_fields.keys() & _PRESET_FIELDS:
            value = getattr(config, name)
            if value is not None:
                overrides[name] = value
        if config.api_key_env is not None:
            overrides["key_env"] = tuple(config.api_key_env)
    preset = dataclasses.replace(preset, **overrides)  # type: ignore[arg-type]
    provider = preset.provider
    if preset.base_url is None:
        return Endpoint(
            preset,
            problem=ProviderError(
                "bad-request",
                f"{provider}: no base URL configured: give one with --base-url or "
                "TETHER_BASE_URL, or as its base_url in the adapter's configuration "
                "(e.g. http://127.0.0.1:8000/v1)",
            ),
        )
    url_problem = check_base_url(preset.base_url)
    if url_problem is not None:
        return Endpoint(preset, problem=ProviderError("bad-request", f"{provider}: {url_problem}"))
    if config is not None and config.api_key is not None:
        key, where = config.api_key.get_secret_value().strip(), "the configuration"
    else:
        where, key = find_key(preset.key_variables, env) or ("the environment", "")
    if not key:
        if not preset.key_required:
            return Endpoint(preset)
        variables = " or ".join(preset.key_variables)
        return Endpoint(
            preset, problem=ProviderError("auth", f"{provider}: no API key: set {variables}")
        )
    key_problem = check_key(key, where)
    if key_problem is not None:
        return Endpoint(preset, problem=ProviderError("auth", f"{provider}: {key_problem}"))
    return Endpoint(preset, api_key=SecretStr(key))


_PRESET_FIELDS = frozenset(f.name for f in dataclasses.fields(Preset))
