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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.fence import environ
from tether.llm.adapters.endpoint import Endpoint, EndpointConfig, HttpConfig, resolve_endpoint
from tether.llm.adapters.http import HttpClient
from tether.llm.adapters.messages_api import ANTHROPIC_VERSION, StreamDecoder, request_body
from tether.llm.adapters.providers import PRESETS
from tether.llm.adapters.streaming import HttpAdapter
from tether.llm.request import ModelRequest, check_provider_name
from tether.llm.service import LLM
from tether.runtime.checked import FieldError, meta

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

    def decoder(self) -> StreamDecoder:
        return StreamDecoder(self.name)


name = "anthropic"
inject = ("llm",)


@dataclass(frozen=True)
class Config(HttpConfig, EndpointConfig):
    """Configuration of the Anthropic adapter plugin (``None`` keeps the preset's value)."""

    provider: str = field(default="anthropic", metadata=meta("the provider name to register"))
    max_tokens: int = field(
        default=8192, metadata=meta("output token limit when a request sets none", ge=1)
    )
    thinking_budget: int | None = field(
        default=None, metadata=meta("enable extended thinking with this token budget", ge=1024)
    )
    anthropic_version: str = ANTHROPIC_VERSION

    def __post_init__(self) -> None:
        super().__post_init__()
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
    http = HttpClient(config.http_options())
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
