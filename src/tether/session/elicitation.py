"""``elicitation/asked`` and ``elicitation/answered``: a server's request for input, and its answer.

An MCP server may ask the person for input during a tool call (see
:mod:`tether.agent.elicitation`); both ends of the question are logged in
the session of the agent whose server asked::

    {"id": "e-1", "server": "deploy", "mode": "form", "message": "Which region?",
     "fields": ["region", "confirm"], "call": "call-3"}
    {"id": "e-1", "action": "accept", "content": {"region": "eu", "confirm": true}}
    {"id": "e-2", "server": "github", "mode": "url", "message": "Sign in",
     "url": "https://github.com/login/device"}
    {"id": "e-2", "action": "cancel", "reason": "not answered within 600 s"}

``action`` is ``accept``, ``decline`` or ``cancel``; ``reason`` says why it
was answered without a person choosing (timed out, withdrawn by a cancel, no
one here to ask, an answer that did not fit the form). ``content`` is the
accepted form's values, masked where a secret may appear (a field named like
a password or a token is ``***``; key-shaped strings are masked); a URL is
stored without its credentials. Not model-visible: the server's tool result
tells the model what came of it. Part of the core vocabulary.

A URL question the person accepted may be followed by the server's word that
what was to be done at the URL is done (MCP's
``notifications/elicitation/complete``), logged as ``elicitation/completed``
with the question's ``id`` and the ``elicitation`` id the server gave it (the
one an editor was shown)::

    {"id": "e-2", "server": "github", "elicitation": "sign-in-1"}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, get_args

import msgspec

from tether.session.fields import as_tuple, bad_field, check_choice, check_id, freeze_data
from tether.session.payload import EventStruct

__all__ = ["ElicitationAnswered", "ElicitationAsked", "ElicitationCompleted"]

ElicitationMode = Literal["form", "url"]
ElicitationAction = Literal["accept", "decline", "cancel"]
_MODES: tuple[str, ...] = get_args(ElicitationMode)
_ACTIONS: tuple[str, ...] = get_args(ElicitationAction)


class ElicitationAsked(EventStruct, frozen=True, omit_defaults=True):
    """A server asked the person for input (see the module docstring)."""

    type: ClassVar[str] = "elicitation/asked"

    id: str
    server: str
    mode: ElicitationMode
    message: str
    fields: tuple[str, ...] = ()
    url: str | None = None
    call: str | None = None

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "server", self.server)
        check_choice(self.type, "mode", self.mode, _MODES)
        if not isinstance(self.message, str):
            raise bad_field(self.type, "message", "str", self.message)
        names = as_tuple(self.type, "fields", self.fields)
        if not all(isinstance(name, str) for name in names):
            raise bad_field(self.type, "fields", "a list of str", names)
        msgspec.structs.force_setattr(self, "fields", names)
        if self.url is not None and not isinstance(self.url, str):
            raise bad_field(self.type, "url", "str", self.url)
        if self.call is not None:
            check_id(self.type, "call", self.call)


class ElicitationAnswered(EventStruct, frozen=True, omit_defaults=True):
    """The answer sent to the server (see the module docstring)."""

    type: ClassVar[str] = "elicitation/answered"

    id: str
    action: ElicitationAction
    reason: str | None = None
    content: Mapping[str, object] | None = None

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_choice(self.type, "action", self.action, _ACTIONS)
        if self.reason is not None and not isinstance(self.reason, str):
            raise bad_field(self.type, "reason", "str", self.reason)
        if self.content is not None:
            content = freeze_data(self.content, where=f"{self.type}: content")
            msgspec.structs.force_setattr(self, "content", content)

    def __hash__(self) -> int:
        return hash((self.id, self.action))


class ElicitationCompleted(EventStruct, frozen=True):
    """The server said the URL question ``id`` (its ``elicitation`` id) is done with."""

    type: ClassVar[str] = "elicitation/completed"

    id: str
    server: str
    elicitation: str

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "server", self.server)
        check_id(self.type, "elicitation", self.elicitation)

    def describe(self) -> str:
        """The line every front end shows for it."""
        return f"(MCP server {self.server}: what it asked you to do at its URL is done)"
