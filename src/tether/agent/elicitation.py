"""Elicitation: a request for input from something an agent uses (an MCP server), put to a person.

An :class:`Elicitation` is what is asked — a message and either a **form**
(a flat object schema: string, number, integer and boolean fields, single
and multi-select enums) or a **URL** the person is sent to (out of band:
what they type there never passes through tether). It is put through the
``elicitation/request`` event (:data:`ELICITATION_REQUEST`), which a front
end answers for the agents it governs; :func:`put` is the one way to ask:

* it logs the question (``elicitation/asked``) and its answer
  (``elicitation/answered``) in the asking agent's session, the answer's
  content masked where a secret may appear (:func:`masked_content`);
* nobody answering (no front end here can ask a person) is a **decline**,
  logged with the reason;
* an accepted form whose content does not match its schema is a
  **cancel**, logged with what was wrong (a front end checks first and
  asks again where it can);
* it never raises: whatever happens, the caller gets an answer to send.

A URL question the person accepted may later be done with at the server's word:
:func:`completed` logs it (``elicitation/completed``).

The front end's side (timeout, withdrawal when the elicitation's
:attr:`~Elicitation.signal` is cancelled) is :mod:`tether.front.eliciting`.
"""

from __future__ import annotations

import enum
import logging
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import msgspec

from tether.agent.types import Agent
from tether.masking import MASKED, mask_secrets, without_credentials
from tether.runtime.keys import Serial
from tether.session.elicitation import (
    ElicitationAnswered,
    ElicitationAsked,
    ElicitationCompleted,
)

if TYPE_CHECKING:
    from tether.runtime.signal import CancelSignal

__all__ = [
    "ELICITATION_REQUEST",
    "Action",
    "Elicitation",
    "ElicitationSchemaError",
    "Elicited",
    "FormField",
    "Value",
    "check_content",
    "completed",
    "masked_content",
    "parse_value",
    "put",
    "read_schema",
]

log = logging.getLogger(__name__)

Value = str | int | float | bool | list[str]
"""A value of an answered form field."""

FieldKind = Literal["string", "number", "integer", "boolean", "array"]


class Action(enum.StrEnum):
    """How a person answered (the MCP and ACP ``action``)."""

    ACCEPT = "accept"
    """Submitted the form (or agreed to open the URL)."""
    DECLINE = "decline"
    """Said no."""
    CANCEL = "cancel"
    """Dismissed it without a choice (also: withdrawn, timed out)."""


class ElicitationSchemaError(ValueError):
    """A requested schema tether cannot present (not a flat object of primitive fields)."""


class FormField(msgspec.Struct, frozen=True, kw_only=True):
    """One field of a form, read from its property schema."""

    name: str
    kind: FieldKind
    required: bool = False
    title: str | None = None
    description: str | None = None
    options: tuple[str, ...] = ()
    """The values an enum field takes (single select; ``array``: multi select)."""
    option_titles: tuple[str, ...] = ()
    """How each option is shown (same length as :attr:`options`)."""
    default: Value | None = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str | None = None
    """``email``, ``uri``, ``date``, ``date-time`` (strings)."""

    @property
    def label(self) -> str:
        return self.title or self.name

    @property
    def secret(self) -> bool:
        """Whether its value may be a secret (kept out of the log)."""
        return _SECRET_NAME.search(self.name) is not None


_SECRET_NAME = re.compile(r"pass|secret|token|key|credential|auth|pin|otp", re.IGNORECASE)


class Elicitation(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """What a server asks a person, on behalf of an agent."""

    id: str
    """tether's id of the question (unique in the session)."""
    server: str
    """Who asks (the MCP server's name)."""
    message: str
    mode: Literal["form", "url"]
    signal: CancelSignal
    """Cancelled when the question is withdrawn (the call it belongs to was cancelled,
    the server went away): it is then answered ``cancel``."""
    fields: tuple[FormField, ...] = ()
    schema: Mapping[str, object] = msgspec.field(default_factory=dict)
    """The requested schema as the server sent it (form mode)."""
    url: str | None = None
    elicitation_id: str | None = None
    """The server's id of a URL elicitation."""
    call_id: str | None = None
    """The tool call during which it was asked, when known."""
    within: float | None = None
    """Seconds it may stay unanswered; then it is answered ``cancel``."""


class Elicited(msgspec.Struct, frozen=True):
    """An answer to an :class:`Elicitation`."""

    action: Action
    content: Mapping[str, Value] | None = None
    """The form's values (``accept`` of a form only)."""
    reason: str | None = None
    """Why it was answered so without a person choosing (timeout, withdrawal, no one
    to ask, an invalid answer); logged."""


ELICITATION_REQUEST = Serial[Elicited, Agent, Elicitation]("elicitation/request")
"""Serial event ``(agent, elicitation) -> Elicited | None``: a front end answers it for
the agents it governs (``None`` for the others). Nobody answering is a decline."""


def read_schema(schema: object) -> tuple[FormField, ...]:
    """The fields of a requested schema: a flat ``object`` whose properties are strings
    (with ``enum``/``oneOf``), numbers, integers, booleans, or arrays of enum strings.

    Raises:
        ElicitationSchemaError: anything else, saying what.
    """
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise ElicitationSchemaError("the requested schema is not an object schema")
    properties = schema.get("properties") or {}
    required = schema.get("required") or ()
    if not isinstance(properties, Mapping) or not isinstance(required, list | tuple):
        raise ElicitationSchemaError("the requested schema's properties are malformed")
    return tuple(
        _field(str(name), spec, str(name) in required) for name, spec in properties.items()
    )


def _field(name: str, spec: object, required: bool) -> FormField:
    if not isinstance(spec, Mapping):
        raise ElicitationSchemaError(f"field {name!r}: its schema is not an object")
    kind = spec.get("type")
    if kind not in ("string", "number", "integer", "boolean", "array"):
        raise ElicitationSchemaError(f"field {name!r}: type {kind!r} cannot be asked")
    options, titles = _options(name, spec.get("items") if kind == "array" else spec)
    if kind == "array" and not options:
        raise ElicitationSchemaError(f"field {name!r}: a list must be a choice of options")
    default = spec.get("default")
    return FormField(
        name=name,
        kind=kind,
        required=required,
        title=_text(spec.get("title")),
        description=_text(spec.get("description")),
        options=options,
        option_titles=titles,
        default=default if _is_value(default) else None,
        minimum=_number(spec.get("minimum")),
        maximum=_number(spec.get("maximum")),
        min_length=_count(spec.get("minLength", spec.get("minItems"))),
        max_length=_count(spec.get("maxLength", spec.get("maxItems"))),
        format=_text(spec.get("format")),
    )


def _options(name: str, spec: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(spec, Mapping):
        return (), ()
    enum_ = spec.get("enum")
    if isinstance(enum_, list):
        values = tuple(str(v) for v in enum_)
        names = spec.get("enumNames")
        shown = tuple(str(n) for n in names) if isinstance(names, list) else values
        return values, shown if len(shown) == len(values) else values
    one_of = spec.get("oneOf", spec.get("anyOf"))
    if isinstance(one_of, list):
        pairs = [(o.get("const"), o.get("title")) for o in one_of if isinstance(o, Mapping)]
        if not pairs or any(not isinstance(const, str) for const, _ in pairs):
            raise ElicitationSchemaError(f"field {name!r}: its options are malformed")
        return tuple(str(c) for c, _ in pairs), tuple(str(t or c) for c, t in pairs)
    return (), ()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_value(value: object) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, str | int | float | bool)


def parse_value(form_field: FormField, text: str) -> Value:
    """``text`` typed by a person as the value of ``form_field`` (an option may be given
    by its value, its title or its number from 1; a list as options separated by commas),
    within the field's limits.

    Raises:
        ValueError: ``text`` is not a value of the field, saying why.
    """
    value = _parsed(form_field, text.strip())
    problem = _problem(form_field, value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _parsed(form_field: FormField, text: str) -> Value:
    kind = form_field.kind
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("y", "yes", "true", "1"):
            return True
        if lowered in ("n", "no", "false", "0"):
            return False
        raise ValueError("answer yes or no")
    if kind == "array":
        return [_option(form_field, part) for part in text.split(",") if part.strip()]
    if form_field.options:
        return _option(form_field, text)
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("a whole number is expected") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError("a number is expected") from None
        if not math.isfinite(number):
            raise ValueError("a finite number is expected")
        return number
    return text


def _option(form_field: FormField, text: str) -> str:
    text = text.strip()
    if text in form_field.options:
        return text
    for value, title in zip(form_field.options, form_field.option_titles, strict=True):
        if text.lower() == title.lower():
            return value
    if text.isdigit() and 1 <= int(text) <= len(form_field.options):
        return form_field.options[int(text) - 1]
    raise ValueError(f"one of {', '.join(form_field.option_titles)} is expected")


def check_content(
    fields: tuple[FormField, ...], content: Mapping[str, object] | None
) -> dict[str, Value]:
    """``content`` checked against ``fields``: every required field present, each value
    of its field's type and within its limits (unknown fields are an error).

    Raises:
        ValueError: the first thing wrong, naming the field.
    """
    content = content or {}
    known = {f.name: f for f in fields}
    for name in content:
        if name not in known:
            raise ValueError(f"{name!r} is not a field of the form")
    checked: dict[str, Value] = {}
    for form_field in fields:
        if form_field.name not in content or content[form_field.name] is None:
            if form_field.required:
                raise ValueError(f"{form_field.label!r} is required")
            continue
        value = content[form_field.name]
        problem = _problem(form_field, value)
        if problem is not None:
            raise ValueError(f"{form_field.label!r}: {problem}")
        checked[form_field.name] = value  # type: ignore[assignment]  # checked by _problem
    return checked


def _problem(form_field: FormField, value: object) -> str | None:
    kind = form_field.kind
    if kind == "boolean":
        return None if isinstance(value, bool) else "true or false is expected"
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "a list of options is expected"
        if any(v not in form_field.options for v in value):
            return f"each must be one of {', '.join(form_field.options)}"
        return _length(form_field, len(value))
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "a number is expected"
        if kind == "integer" and not (isinstance(value, int) or float(value).is_integer()):
            return "a whole number is expected"
        if form_field.minimum is not None and value < form_field.minimum:
            return f"at least {form_field.minimum:g} is expected"
        if form_field.maximum is not None and value > form_field.maximum:
            return f"at most {form_field.maximum:g} is expected"
        return None
    if not isinstance(value, str):
        return "a text is expected"
    if form_field.options and value not in form_field.options:
        return f"one of {', '.join(form_field.options)} is expected"
    return _length(form_field, len(value))


def _length(form_field: FormField, length: int) -> str | None:
    if form_field.min_length is not None and length < form_field.min_length:
        return f"at least {form_field.min_length} expected"
    if form_field.max_length is not None and length > form_field.max_length:
        return f"at most {form_field.max_length} expected"
    return None


def masked_content(
    fields: tuple[FormField, ...], content: Mapping[str, Value]
) -> dict[str, object]:
    """``content`` as it may be logged: a field whose name says it may hold a secret
    (``password``, ``token``, ``api_key`` …) is ``***``; other texts have key-shaped
    strings and URL credentials masked."""
    secret = {f.name for f in fields if f.secret}
    masked: dict[str, object] = {}
    for name, value in content.items():
        if name in secret:
            masked[name] = MASKED
        elif isinstance(value, str):
            masked[name] = mask_secrets(value)
        elif isinstance(value, list):
            masked[name] = [mask_secrets(v) for v in value]
        else:
            masked[name] = value
    return masked


async def put(agent: Agent, elicitation: Elicitation) -> Elicited:
    """Put ``elicitation`` to a person through ``elicitation/request``; the answer to send
    back (see the module docs: logged, declined when no one can answer, never raises
    but for the caller's own cancellation)."""
    session = agent.session
    session.append(
        ElicitationAsked(
            id=elicitation.id,
            server=elicitation.server,
            mode=elicitation.mode,
            message=mask_secrets(elicitation.message),
            fields=tuple(f.name for f in elicitation.fields),
            url=None if elicitation.url is None else without_credentials(elicitation.url),
            call=elicitation.call_id,
        )
    )
    try:
        answer = await agent.ctx.serial(ELICITATION_REQUEST, agent, elicitation)
    except Exception as exc:
        log.warning("session %s: the elicitation of %s failed", agent.id, elicitation.server)
        answer = Elicited(Action.CANCEL, reason=f"asking failed: {exc}")
    if answer is None:
        answer = Elicited(Action.DECLINE, reason="no one here can answer it")
    answer = _checked(elicitation, answer)
    if answer.reason is not None:
        log.info(
            "session %s: the elicitation of %s was answered %s (%s)",
            agent.id,
            elicitation.server,
            answer.action,
            answer.reason,
        )
    content = answer.content
    session.append(
        ElicitationAnswered(
            id=elicitation.id,
            action=answer.action.value,
            reason=answer.reason,
            content=None if content is None else masked_content(elicitation.fields, content),
        )
    )
    return answer


def completed(agent: Agent, elicitation: Elicitation) -> None:
    """Log that ``elicitation``'s server says its URL question is done with (after the
    person accepted it): ``elicitation/completed``, which each front end shows."""
    assert elicitation.elicitation_id is not None, "only a URL question is completed"
    agent.session.append(
        ElicitationCompleted(
            id=elicitation.id, server=elicitation.server, elicitation=elicitation.elicitation_id
        )
    )


def _checked(elicitation: Elicitation, answer: Elicited) -> Elicited:
    """``answer`` as it may be sent: content only with an accepted form, and valid."""
    if answer.action is not Action.ACCEPT or elicitation.mode == "url":
        return Elicited(answer.action, None, answer.reason)
    try:
        content = check_content(elicitation.fields, answer.content)
    except ValueError as exc:
        return Elicited(Action.CANCEL, reason=f"the answer does not fit the form: {exc}")
    return Elicited(Action.ACCEPT, content, answer.reason)
