"""Where an adapter sends a provider's requests, and with which key.

Shared by the adapter plugins:

* :class:`EndpointConfig` and :class:`HttpConfig` — the configuration fields
  every provider and every adapter plugin has (a plugin whose config is both
  declares the HTTP fields with the same types: a ``Struct`` has one base
  with fields);
* :func:`resolve_endpoint` — a :class:`~.providers.Preset` with configuration
  applied and its key found, or the reason it cannot be used.

An endpoint that cannot be used (no key where one is required, no base URL)
is still registered: its requests end at once with an ``auth`` or
``bad-request`` error that says what to set, instead of the provider being
unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Protocol

import msgspec
from msgspec import Meta

from tether.llm.adapters.errors import ProviderError
from tether.llm.adapters.http import HttpOptions
from tether.llm.adapters.providers import (
    GENERIC_KEY_ENV,
    Preset,
    check_base_url,
    check_key,
)
from tether.provider_keys import provider_key
from tether.runtime.schema import Schema, Secret

__all__ = [
    "ConnectTimeout",
    "Endpoint",
    "EndpointConfig",
    "FirstByteTimeout",
    "HttpConfig",
    "IdleTimeout",
    "MaxConnections",
    "ReadTimeout",
    "http_options",
    "resolve_endpoint",
]


ConnectTimeout = Annotated[float, Meta(gt=0, description="seconds to connect")]
ReadTimeout = Annotated[
    float, Meta(gt=0, description="seconds to wait for the next bytes of an answer")
]
IdleTimeout = Annotated[
    float,
    Meta(
        gt=0,
        description="seconds an answer may go without progress (new text, reasoning or "
        "tool-call arguments; keep-alive pings do not count) before the attempt fails",
    ),
]
FirstByteTimeout = Annotated[
    float,
    Meta(
        gt=0,
        description="seconds to wait for the first bytes of an answer (a local server "
        "sends nothing while it processes the prompt)",
    ),
]
MaxConnections = Annotated[int, Meta(ge=1, description="pooled connections")]


class HttpFields(Protocol):
    """What an adapter plugin's config says about its HTTP client."""

    @property
    def connect_timeout(self) -> float: ...
    @property
    def read_timeout(self) -> float: ...
    @property
    def idle_timeout(self) -> float: ...
    @property
    def first_byte_timeout(self) -> float: ...
    @property
    def max_connections(self) -> int: ...


class HttpConfig(Schema, frozen=True):
    """Timeouts (seconds) and pool size of an adapter plugin's HTTP client."""

    connect_timeout: ConnectTimeout = 10.0
    read_timeout: ReadTimeout = 120.0
    idle_timeout: IdleTimeout = 120.0
    first_byte_timeout: FirstByteTimeout = 600.0
    max_connections: MaxConnections = 20


def http_options(config: HttpFields) -> HttpOptions:
    """The HTTP client options ``config`` gives."""
    return HttpOptions(
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        idle_timeout=config.idle_timeout,
        first_byte_timeout=config.first_byte_timeout,
        max_connections=config.max_connections,
    )


class EndpointConfig(Schema, frozen=True):
    """Settings of one provider; a field left ``None`` keeps the preset's value.

    Prefer ``api_key_env`` (the variables a key is read from) to ``api_key``:
    a key written in a composition file is a key on disk.
    """

    base_url: (
        Annotated[str, Meta(description="the API root, up to and including its version path")]
        | None
    ) = None
    api_key: Secret | None = None
    api_key_env: (
        Annotated[
            tuple[str, ...],
            Meta(description=f"variables to read the key from ({GENERIC_KEY_ENV} follows)"),
        ]
        | None
    ) = None
    key_required: bool | None = None
    default_model: str | None = None


class Endpoint(msgspec.Struct, frozen=True):
    """A provider ready to be called, or the reason it cannot be.

    ``api_key`` is masked in every ``repr``; read it with ``get_secret_value()``
    only to build a request header.
    """

    preset: Preset
    api_key: Secret | None = None
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
    """``preset`` with ``config`` applied and its key looked up: the configured one,
    else in ``env``, else the one stored for the provider (``tether auth login``)."""
    overrides: dict[str, object] = {}
    if config is not None:
        # Any field of the config that a preset has too (subclasses add some).
        for name in set(config.__struct_fields__) & _PRESET_FIELDS:
            value = getattr(config, name)
            if value is not None:
                overrides[name] = value
        if config.api_key_env is not None:
            overrides["key_env"] = tuple(config.api_key_env)
    preset = msgspec.structs.replace(preset, **overrides)
    provider = preset.provider
    if preset.base_url is None:
        return Endpoint(
            preset,
            problem=ProviderError(
                "endpoint",
                f"{provider}: no base URL configured: give one with --base-url or "
                "TETHER_BASE_URL, or as its base_url in the adapter's configuration "
                "(e.g. http://127.0.0.1:8000/v1)",
            ),
        )
    url_problem = check_base_url(preset.base_url)
    if url_problem is not None:
        return Endpoint(preset, problem=ProviderError("endpoint", f"{provider}: {url_problem}"))
    if config is not None and config.api_key is not None:
        key, where = config.api_key.get_secret_value().strip(), "the configuration"
    else:
        from tether.credentials import CredentialsError

        try:
            found = provider_key(provider, preset.key_variables, env)
        except CredentialsError as exc:
            return Endpoint(preset, problem=ProviderError("auth", f"{provider}: {exc}"))
        where, key = found or ("the environment", "")
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
    return Endpoint(preset, api_key=Secret(key))


_PRESET_FIELDS = frozenset(Preset.__struct_fields__)
