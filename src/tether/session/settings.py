"""What a session was set to, stored in its log: options, grants, a cleared history, its plan.

These events are not model-visible and may come anywhere in a log (between
turns or inside one). They are part of the core vocabulary: every
`EventRegistry` knows them, so a log holding them loads without the plugin
or the editor bridge that wrote them.

==========================  ====================================================
type                        data
==========================  ====================================================
``session/config``          ``{option, value}``: an option of the session set to
                            a value (``model``: the model of the next request
                            on; ``base_url``: the endpoint of that model's
                            provider; ``mode``: the editor's permission mode).
                            The last one of an option wins.
``permission/granted``      ``{rule}``: an allow rule the session keeps
                            ("always allow"); an older log's ``{tool}`` is the
                            rule of that tool (``kind:edit``: ``Edit``).
``history/cleared``         ``{}``: the model sees nothing before it; the
                            earlier turns stay in the log.
``plan/updated``            ``{entries: [{content, priority, status}]}``: the
                            whole task list as it now stands.
``session/title``           ``{title}``: the session's title (one a model wrote);
                            it replaces the first prompt's text as the title.
==========================  ====================================================

:class:`SessionSettings` folds a log into what it says now, one event at a
time, so a loaded session and a live one agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, Literal, get_args

import msgspec

from tether.session.errors import EventFormatError
from tether.session.events import Event, of_types
from tether.session.fields import check_id
from tether.session.vocabulary import EventStruct

__all__ = [
    "BASE_URL_OPTION",
    "MODEL_OPTION",
    "MODE_OPTION",
    "PLAN_PRIORITIES",
    "PLAN_STATUSES",
    "SANDBOX_OPTION",
    "SETTINGS_PAYLOADS",
    "SETTINGS_TYPES",
    "ConfigChanged",
    "HistoryCleared",
    "PermissionGranted",
    "PlanEntry",
    "PlanPriority",
    "PlanStatus",
    "PlanUpdated",
    "SessionSettings",
    "SessionTitled",
]

MODEL_OPTION = "model"
"""The ``session/config`` option that chooses the model of the next request."""

BASE_URL_OPTION = "base_url"
"""The ``session/config`` option that points the current model at another endpoint
of its provider (set after a ``model`` switch, which drops it)."""

MODE_OPTION = "mode"
"""The ``session/config`` option the editor bridge keeps its permission mode in."""

SANDBOX_OPTION = "sandbox"
"""The ``session/config`` option that sets the sandbox mode of the session's next
processes (``read-only``, ``workspace-write``, ``full-access``)."""


class ConfigChanged(EventStruct, frozen=True):
    """``session/config``: option ``option`` of the session is now ``value``."""

    type: ClassVar[str] = "session/config"

    option: str
    value: str

    def __post_init__(self) -> None:
        check_id(self.type, "option", self.option)
        check_id(self.type, "value", self.value)


EDITS_GRANT = "kind:edit"
"""The ``tool`` of an older log's grant of every edit."""


class PermissionGranted(EventStruct, frozen=True, omit_defaults=True):
    """``permission/granted``: an allow rule this session keeps ("always allow").

    ``rule`` is the rule as written (``Bash(git status:*)``, ``Edit(src/**)``);
    a log written before rules were kept holds ``tool`` instead — a tool name,
    or ``kind:edit`` for every edit — which reads as the rule of that tool
    (:attr:`as_rule`). Exactly one of the two is given.
    """

    type: ClassVar[str] = "permission/granted"

    rule: str | None = None
    tool: str | None = None

    def __post_init__(self) -> None:
        if (self.rule is None) == (self.tool is None):
            raise EventFormatError(f"{self.type}: give exactly one of 'rule' and 'tool'")
        if self.rule is not None:
            check_id(self.type, "rule", self.rule)
        if self.tool is not None:
            check_id(self.type, "tool", self.tool)

    @property
    def as_rule(self) -> str:
        """The allow rule this grant keeps."""
        if self.rule is not None:
            return self.rule
        return "Edit" if self.tool == EDITS_GRANT else str(self.tool)


class HistoryCleared(EventStruct, frozen=True):
    """``history/cleared``: later model requests start from an empty conversation."""

    type: ClassVar[str] = "history/cleared"


PlanPriority = Literal["high", "medium", "low"]
PlanStatus = Literal["pending", "in_progress", "completed"]
PLAN_PRIORITIES: tuple[str, ...] = get_args(PlanPriority)
PLAN_STATUSES: tuple[str, ...] = get_args(PlanStatus)


class PlanEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One task of a plan."""

    content: str
    priority: PlanPriority
    status: PlanStatus

    def __post_init__(self) -> None:
        where = f"{PlanUpdated.type} entry"
        check_id(where, "content", self.content)
        if self.priority not in PLAN_PRIORITIES:
            raise EventFormatError(
                f"{where}: priority must be one of {PLAN_PRIORITIES}, got {self.priority!r}"
            )
        if self.status not in PLAN_STATUSES:
            raise EventFormatError(
                f"{where}: status must be one of {PLAN_STATUSES}, got {self.status!r}"
            )


class PlanUpdated(EventStruct, frozen=True):
    """``plan/updated``: the session's task list, whole (an empty one clears it)."""

    type: ClassVar[str] = "plan/updated"

    entries: tuple[PlanEntry, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.entries, tuple) or not all(
            isinstance(entry, PlanEntry) for entry in self.entries
        ):
            raise EventFormatError(f"{self.type}: entries must be a tuple of plan entries")


class SessionTitled(EventStruct, frozen=True):
    """``session/title``: what the session is called (written once a model named it)."""

    type: ClassVar[str] = "session/title"

    title: str

    def __post_init__(self) -> None:
        check_id(self.type, "title", self.title)


SETTINGS_PAYLOADS: tuple[type[EventStruct], ...] = (
    ConfigChanged,
    PermissionGranted,
    HistoryCleared,
    PlanUpdated,
    SessionTitled,
)
"""The payload classes of this module, all in the core vocabulary."""

SETTINGS_TYPES = frozenset(cls.type for cls in SETTINGS_PAYLOADS)
"""The types `SessionSettings` folds: the others change nothing in it."""


class SessionSettings:
    """What a session's log says it is set to now, folded one event at a time.

    ``options`` maps each ``session/config`` option to its last value,
    ``allowed`` holds the allow rules kept by "always allow", in order, ``plan`` is the last
    plan (empty before any), ``cleared_at`` the seq of the last
    ``history/cleared`` (``None`` if the history was never cleared), and
    ``title`` the last ``session/title`` (``None`` before any).
    """

    __slots__ = ("_options", "allowed", "cleared_at", "plan", "title")

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._options: dict[str, str] = {}
        self.allowed: tuple[str, ...] = ()
        self.plan: tuple[PlanEntry, ...] = ()
        self.cleared_at: int | None = None
        self.title: str | None = None
        for event in of_types(events, SETTINGS_TYPES):
            self.advance(event)

    @property
    def options(self) -> Mapping[str, str]:
        return self._options

    def advance(self, event: Event) -> bool:
        """Fold ``event`` in; whether it was one of this module's types."""
        # By name first: reading a loaded chunk's payload would build it.
        if event.type not in SETTINGS_TYPES:
            return False
        payload = event.payload
        if isinstance(payload, ConfigChanged):
            self._options[payload.option] = payload.value
        elif isinstance(payload, PermissionGranted):
            rule = payload.as_rule
            if rule not in self.allowed:
                self.allowed = (*self.allowed, rule)
        elif isinstance(payload, HistoryCleared):
            self.cleared_at = event.seq
        elif isinstance(payload, PlanUpdated):
            self.plan = payload.entries
        elif isinstance(payload, SessionTitled):
            self.title = payload.title
        else:
            return False
        return True
