"""Model adapters for real providers, over HTTP with server-sent events.

Plugins (mount them under the ``llm`` service):

* :mod:`tether.llm.adapters.openai` — Chat Completions: the ``deepseek``,
  ``openai`` and ``openai-compatible`` providers (vLLM, llama.cpp server,
  Ollama, …), and any others its configuration names;
* :mod:`tether.llm.adapters.anthropic` — the Messages API: ``anthropic``.

Failed requests end their stream with a normalized error code
(:mod:`tether.llm.adapters.errors`); the retry policy is the separate
:mod:`tether.loop.retry` plugin. :func:`resolve_model_settings` decides and
checks the model before anything starts (for the command line).

Nothing here imports ``httpx`` until the first request.
"""

from tether.llm.adapters.errors import ERROR_CODES, RETRYABLE, ErrorCode, ProviderError
from tether.llm.adapters.settings import (
    ModelSettings,
    ModelSettingsError,
    resolve_model_settings,
)

__all__ = [
    "ERROR_CODES",
    "RETRYABLE",
    "ErrorCode",
    "ModelSettings",
    "ModelSettingsError",
    "ProviderError",
    "resolve_model_settings",
]
