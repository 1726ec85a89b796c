"""Session settings events: core types, folded into what the session is set to now."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.session.builders import answer, new_session, open_step, user
from tether.content import AssistantMessage, TextBlock, UserRoleMessage
from tether.loop.history import History
from tether.persist.backends import JsonlBackend
from tether.session import (
    EventFormatError,
    EventRegistry,
    Session,
    SessionHeader,
    derive_messages,
)
from tether.session.settings import (
    ConfigChanged,
    HistoryCleared,
    PermissionGranted,
    PlanEntry,
    PlanUpdated,
    SessionSettings,
)


def test_a_clear_hides_earlier_messages_from_the_model_but_keeps_them_logged() -> None:
    session = new_session()
    open_step(session)
    session.append(user("u1", "first"))
    session.append(answer(text="one"))
    history = History(session)
    assert len(history.messages()) == 2
    session.append(HistoryCleared())
    session.append(user("u2", "second"))
    assert derive_messages(session) == [UserRoleMessage((TextBlock("second"),))]
    assert history.messages() == (UserRoleMessage((TextBlock("second"),)),)
    assert any(e.type == "user/message" and e.data["id"] == "u1" for e in session.events)
    session.append(answer(text="two"))
    assert history.messages()[-1] == AssistantMessage((TextBlock("two"),))


def test_the_last_model_choice_in_the_log_is_the_next_requests_model() -> None:
    session = new_session()
    history = History(session)
    assert history.model() == "offline"
    session.append(ConfigChanged(option="model", value="scripted:a"))
    session.append(ConfigChanged(option="mode", value="auto"))
    session.append(ConfigChanged(option="model", value="scripted:b"))
    assert history.model() == "scripted:b"


def test_settings_round_trip_through_a_log_with_only_the_core_registry(tmp_path: Path) -> None:
    session = new_session()
    plan = (PlanEntry("write it", "high", "in_progress"), PlanEntry("test it", "low", "pending"))
    for payload in (
        ConfigChanged(option="mode", value="auto"),
        PermissionGranted(tool="bash"),
        PermissionGranted(rule="Bash(git status:*)"),
        PermissionGranted(tool="kind:edit"),
        HistoryCleared(),
        PlanUpdated(entries=plan),
    ):
        session.append(payload)
    backend = JsonlBackend(tmp_path)
    try:
        backend.write(session.header.to_record(), [e.to_stored_record() for e in session.events])
        stored = backend.load(session.id)
    finally:
        backend.close()
    core = EventRegistry()
    header = SessionHeader.from_record(stored.header)
    loaded = Session.restore(header, core.decode_stored(stored.events), registry=core)
    settings = SessionSettings(loaded.events)
    assert settings.options == {"mode": "auto"}
    assert settings.allowed == ("bash", "Bash(git status:*)", "Edit")
    assert settings.cleared_at == 4
    assert settings.plan == plan


@pytest.mark.parametrize(
    "build",
    [
        lambda: ConfigChanged(option="", value="x"),
        lambda: PermissionGranted(tool=""),
        lambda: PermissionGranted(rule=""),
        PermissionGranted,
        lambda: PermissionGranted(rule="Bash", tool="bash"),
        lambda: PlanEntry("x", "urgent", "pending"),  # type: ignore[arg-type]
        lambda: PlanEntry("x", "high", "done"),  # type: ignore[arg-type]
        lambda: PlanEntry("", "high", "pending"),
    ],
)
def test_malformed_settings_are_refused_with_the_field_named(build: object) -> None:
    with pytest.raises(EventFormatError):
        build()  # type: ignore[operator]
