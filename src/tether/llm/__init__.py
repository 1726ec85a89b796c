"""The LLM seam: model-facing messages, normalized stream chunks, requests and adapters.

``tether.llm.service`` is the plugin that provides ``ctx.llm``;
``tether.llm.offline`` is the built-in scripted provider (not an LLM).
"""

from tether.content import (
    AssistantBlock,
    AssistantMessage,
    ImageRef,
    Message,
    ReasoningBlock,
    RedactedReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserBlock,
    UserRoleMessage,
)
from tether.llm.assemble import Assembled, Assembler, InvalidToolCall, assemble
from tether.llm.chunks import (
    FINISH_REASONS,
    Finish,
    FinishReason,
    ReasoningDelta,
    RedactedReasoning,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tether.llm.errors import LlmError, ProviderConflictError, UnknownProviderError
from tether.llm.request import ModelRequest, ToolSpec, check_provider_name, parse_model_ref
from tether.llm.service import LlmService, LlmView, ModelAdapter

__all__ = [
    "FINISH_REASONS",
    "Assembled",
    "Assembler",
    "AssistantBlock",
    "AssistantMessage",
    "Finish",
    "FinishReason",
    "ImageRef",
    "InvalidToolCall",
    "LlmError",
    "LlmService",
    "LlmView",
    "Message",
    "ModelAdapter",
    "ModelRequest",
    "ProviderConflictError",
    "ReasoningBlock",
    "ReasoningDelta",
    "RedactedReasoning",
    "RedactedReasoningBlock",
    "StreamChunk",
    "SystemMessage",
    "TextBlock",
    "TextDelta",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolMessage",
    "ToolSpec",
    "UnknownProviderError",
    "Usage",
    "UserBlock",
    "UserRoleMessage",
    "assemble",
    "check_provider_name",
    "parse_model_ref",
]
