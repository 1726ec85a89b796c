"""The model a session runs on at any seq: the one resolver every front end and the loop use.

A session's model is a :class:`ModelChoice`: a model reference
(``PROVIDER:MODEL``) and, when the session was given one, the base URL of the
provider's endpoint. Keys are never part of it: they come from the
environment (or ``tether auth login``) of whoever runs the session.

:func:`session_model` is the resolver: the model of a session's request at
any seq. The rule, first match wins, at seq ``n``:

1. the last switch logged before ``n``: ``session/config model`` sets the
   model (and drops a base URL given for the model before it), then
   ``session/config base_url`` sets the base URL of that model;
2. what the header says: its ``model`` label, and its ``base_url`` label
   (written only with a model);
3. the configuration's model (the ``agent_loop`` row's ``model``), for a log
   whose header names none;
4. :data:`FALLBACK_MODEL`, the offline model (a script, not an LLM).

:func:`session_model` applies it to a log (``at=0``: what the session started
on); :class:`ModelTracker` folds it one event at a time, for the agent loop
and the views that follow a live session.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from tether.masking import without_credentials
from tether.session.events import Event
from tether.session.log import Session
from tether.session.settings import BASE_URL_OPTION, MODEL_OPTION, ConfigChanged

__all__ = [
    "BASE_URL_LABEL",
    "FALLBACK_MODEL",
    "MODEL_LABEL",
    "ModelChoice",
    "ModelTracker",
    "header_labels",
    "session_model",
    "start_model",
]

FALLBACK_MODEL = "offline"
"""The model of a session when neither its log nor the configuration names one."""

MODEL_LABEL = "model"
"""The header label holding the model a session was created with."""

BASE_URL_LABEL = "base_url"
"""The header label holding the base URL the session's first model was reached at."""

_CONFIG = ConfigChanged.type


class ModelChoice(msgspec.Struct, frozen=True):
    """A model reference, and the base URL of its provider when one was chosen.

    ``base_url`` ``None`` means the provider's configured endpoint.
    """

    model: str
    base_url: str | None = None

    def switched(self, option: str, value: str) -> ModelChoice:
        """This choice after ``session/config {option: value}``; itself for other options."""
        if option == MODEL_OPTION:
            return ModelChoice(value)
        if option == BASE_URL_OPTION:
            return ModelChoice(self.model, value)
        return self


def header_labels(choice: ModelChoice) -> dict[str, str]:
    """The header labels that record ``choice`` for a new session.

    A base URL is recorded without its credentials (``user:pass@``): like a
    key, they come from whoever runs the session, never from its log.
    """
    labels = {MODEL_LABEL: choice.model}
    if choice.base_url is not None:
        labels[BASE_URL_LABEL] = without_credentials(choice.base_url)
    return labels


def _started_on(labels: Mapping[str, str], configured: str | None) -> ModelChoice:
    """What a header's ``labels`` say the session started on; else ``configured``; else
    the fallback."""
    model = labels.get(MODEL_LABEL)
    if model:
        return ModelChoice(model, labels.get(BASE_URL_LABEL) or None)
    return ModelChoice(configured or FALLBACK_MODEL)


def start_model(labels: Mapping[str, str], configured: str | None = None) -> str:
    """The model a session whose header has ``labels`` started on (``configured``: the
    configuration's model, for a header that names none)."""
    return _started_on(labels, configured).model


class ModelTracker:
    """A session's :class:`ModelChoice`, folded one event at a time from its header's."""

    __slots__ = ("current",)

    def __init__(self, start: ModelChoice) -> None:
        self.current = start
        """The model of the next request, as of the events folded so far."""

    def advance(self, event: Event) -> bool:
        """Fold ``event`` in; whether it changed the choice."""
        if event.type != _CONFIG:
            return False
        payload = event.payload
        if not isinstance(payload, ConfigChanged):
            return False
        before = self.current
        self.current = before.switched(payload.option, payload.value)
        return self.current != before


def session_model(
    session: Session, *, configured: str | None = None, at: int | None = None
) -> ModelChoice:
    """The model of ``session``'s request at seq ``at`` (default: its next one; ``0``:
    the one it started on).

    ``configured`` is the configuration's model, used only when the header
    names none (see the module docstring for the whole rule).
    """
    tracker = ModelTracker(_started_on(session.header.meta, configured))
    if at == 0:
        return tracker.current
    for event in session.events.of_types(frozenset({_CONFIG}), 0, at):
        tracker.advance(event)
    return tracker.current
