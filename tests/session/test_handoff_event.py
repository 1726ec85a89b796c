"""``session/handed-off``: the record a draining host leaves as its last event."""

from __future__ import annotations

import pytest

from tether.session import DEFAULT_REGISTRY, EventFormatError, SessionHandedOff


def test_a_handoff_record_round_trips_through_the_core_registry() -> None:
    record = SessionHandedOff(host="worker-3:4242", turn=2, stopped=True)
    decoded = DEFAULT_REGISTRY.decode(SessionHandedOff.type, record.to_data())
    assert decoded == record
    assert SessionHandedOff(host="w:1", turn=0, stopped=False).turn == 0  # before any turn


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"host": "", "turn": 1, "stopped": True}, "host"),
        ({"host": "w:1", "turn": -1, "stopped": True}, "turn"),
        ({"host": "w:1", "turn": True, "stopped": True}, "turn"),
        ({"host": "w:1", "turn": 1, "stopped": "yes"}, "stopped"),
    ],
)
def test_a_bad_handoff_record_is_refused_naming_its_field(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(EventFormatError, match=f"session/handed-off.*{field}"):
        DEFAULT_REGISTRY.decode(SessionHandedOff.type, fields)
