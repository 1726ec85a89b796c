"""The OpenAI-compatible adapter plugin: Chat Completions streaming over HTTP.

It registers one provider per entry of its ``providers``, starting from the
presets (see :mod:`~tether.llm.adapters.providers`):

=====================  ===============================  ==========================
provider               base URL                          key
=====================  ===============================  ==========================
``deepseek``           ``https://api.deepseek.com``      ``DEEPSEEK_API_KEY``
``openai``             ``https://api.openai.com/v1``     ``OPENAI_API_KEY``
``openai-compatible``  configured (``base_url``)         optional
=====================  ===============================  ==========================

(``TETHER_API_KEY`` is read for each after its own variable.) An entry whose
name is not a preset adds a provider; it needs a ``base_url``::

    - id: openai
      plugin: tether.llm.adapters.openai
      config:
        providers:
          openai-compatible: {base_url: "http://127.0.0.1:8000/v1"}
          ollama: {base_url: "http://127.0.0.1:11434/v1"}

Then ``--model ollama:qwen3`` talks to Ollama. ``text_tool_calls`` turns tool
calls a model writes as text into calls (:mod:`~.text_calls`); left unset, it
is on for a base URL on this machine (``127.0.0.1``, ``localhost``) and off
for every other. All providers of the plugin
share its HTTP clients (one per scheme, see :class:`~.http.HttpClient`;
created on first use, closed when the plugin unloads); their timeouts are
the plugin's ``connect_timeout``, ``read_timeout``, ``first_byte_timeout`` and
``idle_timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec
from msgspec import Meta

from tether.fence import environ
from tether.llm.adapters.chat_completions import RequestEncoder, StreamDecoder, request_body
from tether.llm.adapters.decoding import Decoder
from tether.llm.adapters.endpoint import (
    Endpoint,
    EndpointConfig,
    HttpConfig,
    http_options,
    resolve_endpoint,
)
from tether.llm.adapters.http import HttpClient
from tether.llm.adapters.providers import OPENAI_PLUGIN, PRESETS
from tether.llm.adapters.streaming import HttpAdapter
from tether.llm.adapters.text_calls import TextCallDecoder, is_local
from tether.llm.request import ModelRequest, check_provider_name
from tether.llm.service import LLM
from tether.runtime.schema import FieldError

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["ChatCompletionsAdapter", "Config", "ProviderConfig", "apply", "inject", "name"]


class ChatCompletionsAdapter(HttpAdapter):
    """One OpenAI-compatible provider: ``POST {base_url}/chat/completions``, streamed."""

    __slots__ = ("_encoder", "_text_calls")

    path = "/chat/completions"

    def __init__(self, endpoint: Endpoint, http: HttpClient) -> None:
        super().__init__(endpoint, http)
        preset = endpoint.preset
        self._encoder = RequestEncoder(
            replay_reasoning=preset.replay_reasoning,
            max_tokens_field=preset.max_tokens_field,
            parallel_tool_calls=preset.parallel_tool_calls,
        )
        text_calls = preset.text_tool_calls
        self._text_calls = is_local(preset.base_url) if text_calls is None else text_calls

    def body(self, request: ModelRequest, model: str) -> dict[str, object]:
        preset = self.endpoint.preset
        return request_body(
            request,
            model=model,
            replay_reasoning=preset.replay_reasoning,
            max_tokens_field=preset.max_tokens_field,
            parallel_tool_calls=preset.parallel_tool_calls,
        )

    def encode(self, request: ModelRequest, model: str) -> bytes:
        return self._encoder.encode(request, model=model)

    def headers(self) -> dict[str, str]:
        secret = self.endpoint.secret
        return {} if secret is None else {"authorization": f"Bearer {secret}"}

    def decoder(self, request: ModelRequest) -> Decoder:
        decoder = StreamDecoder(self.name)
        if not self._text_calls or not request.tools:
            return decoder
        return TextCallDecoder(decoder, frozenset(tool.name for tool in request.tools))


name = "openai"
inject = ("llm",)


class ProviderConfig(EndpointConfig, frozen=True):
    """One provider of the plugin; ``None`` keeps the preset's value."""

    replay_reasoning: (
        Annotated[
            bool,
            Meta(description="send reasoning_content back on assistant messages that called tools"),
        ]
        | None
    ) = None
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    parallel_tool_calls: (
        Annotated[
            bool,
            Meta(description="ask for several tool calls per answer (requests with tools)"),
        ]
        | None
    ) = None
    text_tool_calls: (
        Annotated[
            bool,
            Meta(
                description="turn tool calls the model writes as text (fenced JSON, "
                "<tool_call> tags) into calls; on by default for a server on this machine"
            ),
        ]
        | None
    ) = None


class Config(HttpConfig, frozen=True):
    """Configuration of the OpenAI-compatible adapter plugin."""

    providers: Annotated[
        Mapping[str, ProviderConfig],
        Meta(description="per-provider settings over the presets; a new name adds a provider"),
    ] = {}
    presets: Annotated[bool, Meta(description="register the built-in presets")] = True

    def __post_init__(self) -> None:
        for provider in self.providers:
            try:
                check_provider_name(provider)
            except ValueError as exc:
                raise FieldError(("providers", provider), str(exc)) from None


def endpoints(config: Config, env: Mapping[str, str]) -> list[Endpoint]:
    """The endpoints ``config`` describes, keys looked up in ``env``."""
    presets = {
        provider: preset
        for provider, preset in PRESETS.items()
        if preset.plugin == OPENAI_PLUGIN and config.presets
    }
    for provider in config.providers:
        if provider not in presets:
            # A provider of its own is configured like ``openai-compatible``.
            presets[provider] = msgspec.structs.replace(
                PRESETS["openai-compatible"], provider=provider
            )
    return [
        resolve_endpoint(preset, config.providers.get(provider), env)
        for provider, preset in presets.items()
    ]


async def apply(ctx: Context, config: Config) -> None:
    """Register every configured provider on ``ctx.llm`` until this plugin unloads."""
    llm = ctx.service(LLM)
    http = HttpClient(http_options(config))
    await ctx.effect(lambda: http.aclose, label="openai http client")
    for endpoint in endpoints(config, environ()):
        await llm.register(endpoint.provider, ChatCompletionsAdapter(endpoint, http))
