"""Sessions: durable, append-only event logs and what is derived from them.

A `Session` is a header plus a list of immutable `Event` records. Code appends
typed payloads (`TurnStart`, `UserMessageEvent`, …); the session checks them
against its structural invariants, records them and tells its observers.
`derive_messages` rebuilds the model-visible conversation from the log,
`replay_inbox` rebuilds an agent's inbox, and `repair` closes a turn a crash
left open.
"""

from tether.session.compaction import CompactionTrigger, ContextCompacted
from tether.session.derive import derive_messages
from tether.session.errors import (
    EventFormatError,
    EventTypeConflictError,
    HeaderFormatError,
    ReentrantAppendError,
    SessionError,
    SessionInvariantError,
    UnknownEventTypeError,
)
from tether.session.events import Event
from tether.session.handoff import SessionHandedOff
from tether.session.inbox import InboxState, replay_inbox
from tether.session.log import Delegation, Lineage, Observer, Session, SessionEvents, SessionHeader
from tether.session.payload import EventPayload, EventStruct
from tether.session.previews import ToolPreviewed
from tether.session.prompt_cut import PromptCut
from tether.session.receipt import StopParts, Stopped, StoppedAgent, ToolStopped
from tether.session.registry import DEFAULT_REGISTRY, EventRegistry
from tether.session.repair import closing_payloads, repair
from tether.session.ruling import PermissionRuled
from tether.session.snapshot import SnapshotMoment, WorkspaceSnapshot
from tether.session.structure import PendingToolCall
from tether.session.vocabulary import (
    BUILTIN_PAYLOADS,
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Blocked,
    ChunkKind,
    Completed,
    Errored,
    InboxOp,
    InboxQueue,
    InboxSpliced,
    Interrupted,
    MaxTokens,
    OverBudget,
    RetryEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessageEvent,
)

__all__ = [
    "BUILTIN_PAYLOADS",
    "DEFAULT_REGISTRY",
    "Aborted",
    "AssistantChunk",
    "AssistantMessageEvent",
    "Blocked",
    "ChunkKind",
    "CompactionTrigger",
    "Completed",
    "ContextCompacted",
    "Delegation",
    "Errored",
    "Event",
    "EventFormatError",
    "EventPayload",
    "EventRegistry",
    "EventStruct",
    "EventTypeConflictError",
    "HeaderFormatError",
    "InboxOp",
    "InboxQueue",
    "InboxSpliced",
    "InboxState",
    "Interrupted",
    "Lineage",
    "MaxTokens",
    "Observer",
    "OverBudget",
    "PendingToolCall",
    "PermissionRuled",
    "PromptCut",
    "ReentrantAppendError",
    "RetryEvent",
    "Session",
    "SessionError",
    "SessionEvents",
    "SessionHandedOff",
    "SessionHeader",
    "SessionInvariantError",
    "SnapshotMoment",
    "StepEnd",
    "StepStart",
    "StopParts",
    "Stopped",
    "StoppedAgent",
    "ToolCallEvent",
    "ToolPreviewed",
    "ToolResultEvent",
    "ToolStopped",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "UnknownEventTypeError",
    "UserMessageEvent",
    "WorkspaceSnapshot",
    "closing_payloads",
    "derive_messages",
    "repair",
    "replay_inbox",
]
