"""The Anthropic adapter plugin: Messages API streaming over HTTP.

Registers the ``anthropic`` provider (``ANTHROPIC_API_KEY``, then
``TETHER_API_KEY``; base URL ``https://api.anthropic.com/v1``)::

    - id: anthropic
      plugin: tether.llm.adapters.anthropic
      config: {max_tokens: 8192, thinking_budget: 4096}

Text, tool use and extended thinking (``thinking_budget``) stream as
normalized chunks; thinking comes back to the API with its signature. The
HTTP client is created on the first request and closed when the plugin
unloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from tether.fence import environ
from tether.llm.adapters.endpoint import (
    ConnectTimeout,
    Endpoint,
    EndpointConfig,
    FirstByteTimeout,
    IdleTimeout,
    MaxConnections,
    ReadTimeout,
    http_options,
    resolve_endpoint,
)
from tether.llm.adapters.http import HttpClient
from tether.llm.adapters.messages_api import ANTHROPIC_VERSION, StreamDecoder, request_body
from tether.llm.adapters.providers import PRESETS
from tether.llm.adapters.streaming import HttpAdapter
from tether.llm.request import ModelRequest, check_provider_name
from tether.llm.service import LLM
from tether.runtime.schema import FieldError

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["Config", "MessagesAdapter", "apply", "inject", "name"]


class MessagesAdapter(HttpAdapter):
    """The Anthropic provider: ``POST {base_url}/messages``, streamed."""

    __slots__ = ("_max_tokens", "_thinking_budget", "_version")

    path = "/messages"

    def __init__(
        self,
        endpoint: Endpoint,
        http: HttpClient,
        *,
        max_tokens: int = 8192,
        thinking_budget: int | None = None,
        version: str = ANTHROPIC_VERSION,
    ) -> None:
        super().__init__(endpoint, http)
        self._max_tokens = max_tokens
        self._thinking_budget = thinking_budget
        self._version = version

    def body(self, request: ModelRequest, model: str) -> dict[str, object]:
        return request_body(
            request,
            model=model,
            max_tokens=self._max_tokens,
            thinking_budget=self._thinking_budget,
        )

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self._version}
        secret = self.endpoint.secret
        if secret is not None:
            headers["x-api-key"] = secret
        return headers

    def decoder(self, request: ModelRequest) -> StreamDecoder:
        return StreamDecoder(self.name)


name = "anthropic"
inject = ("llm",)


class Config(EndpointConfig, frozen=True):
    """Configuration of the Anthropic adapter plugin (``None`` keeps the preset's value).

    Its HTTP fields are :class:`~.endpoint.HttpConfig`'s.
    """

    connect_timeout: ConnectTimeout = 10.0
    read_timeout: ReadTimeout = 120.0
    idle_timeout: IdleTimeout = 120.0
    first_byte_timeout: FirstByteTimeout = 600.0
    max_connections: MaxConnections = 20
    provider: Annotated[str, Meta(description="the provider name to register")] = "anthropic"
    max_tokens: Annotated[
        int, Meta(ge=1, description="output token limit when a request sets none")
    ] = 8192
    thinking_budget: (
        Annotated[int, Meta(ge=1024, description="enable extended thinking with this token budget")]
        | None
    ) = None
    anthropic_version: str = ANTHROPIC_VERSION

    def __post_init__(self) -> None:
        try:
            check_provider_name(self.provider)
        except ValueError as exc:
            raise FieldError(("provider",), str(exc)) from None


def endpoint(config: Config, env: Mapping[str, str]) -> Endpoint:
    """The endpoint ``config`` describes (``provider`` included), its key read from ``env``."""
    return resolve_endpoint(PRESETS["anthropic"], config, env)


async def apply(ctx: Context, config: Config) -> None:
    """Register the provider on ``ctx.llm`` until this plugin unloads."""
    llm = ctx.service(LLM)
    http = HttpClient(http_options(config))
    await ctx.effect(lambda: http.aclose, label="anthropic http client")
    resolved = endpoint(config, environ())
    adapter = MessagesAdapter(
        resolved,
        http,
        max_tokens=config.max_tokens,
        thinking_budget=config.thinking_budget,
        version=config.anthropic_version,
    )
    await llm.register(resolved.provider, adapter)
