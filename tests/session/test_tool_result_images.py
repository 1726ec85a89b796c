"""A tool result can carry images: stored beside its text, read back, and derived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.session.builders import answer, call, new_session, open_step, started
from tether.content import ImageRef, ToolMessage
from tether.persist.backends import JsonlBackend
from tether.session import (
    DEFAULT_REGISTRY,
    EventFormatError,
    Session,
    SessionHeader,
    ToolResultEvent,
    derive_messages,
)

IMAGE = ImageRef.inline("image/png", b"\x89PNG\r\n\x1a\nnot really")


def session_with_image_result() -> Session:
    session = new_session()
    open_step(session)
    block = call("c1", "read", path="shot.png")
    session.append(answer(block))
    session.append(started(block))
    session.append(ToolResultEvent("c1", "read", "shot.png: an image", False, (IMAGE,)))
    return session


def test_a_result_with_images_is_stored_and_read_back_whole(tmp_path: Path) -> None:
    session = session_with_image_result()
    backend = JsonlBackend(tmp_path)
    try:
        backend.write(session.header.to_record(), [e.to_record() for e in session.events])
        stored = backend.load(session.id)
    finally:
        backend.close()
    line = (tmp_path / "sessions" / f"{session.id}.jsonl").read_text().splitlines()[-1]
    assert json.loads(line)["data"]["images"] == [
        {"type": "image", "url": IMAGE.url, "mime_type": "image/png"}
    ]
    loaded = Session.restore(
        SessionHeader.from_record(stored.header), DEFAULT_REGISTRY.decode_stored(stored.events)
    )
    assert [e.to_record() for e in loaded.events] == [e.to_record() for e in session.events]
    assert loaded.events[-1].payload == session.events[-1].payload
    *_, last = derive_messages(loaded)
    assert last == ToolMessage("c1", "read", "shot.png: an image", False, (IMAGE,))


def test_a_result_without_images_is_stored_as_it_always_was() -> None:
    plain = ToolResultEvent("c1", "bash", "done", is_error=False)
    assert plain.to_json() == b'{"id":"c1","name":"bash","content":"done","is_error":false}'
    old = {"id": "c1", "name": "bash", "content": "done", "is_error": False}
    assert ToolResultEvent.from_data(old) == plain and plain.images == ()


def test_images_of_a_result_must_be_images() -> None:
    with pytest.raises(EventFormatError, match="images entries"):
        ToolResultEvent("c1", "read", "x", False, ("not an image",))  # type: ignore[arg-type]
    bad = {"id": "c1", "name": "read", "content": "x", "is_error": False, "images": [{"a": 1}]}
    with pytest.raises(EventFormatError):
        ToolResultEvent.from_data(bad)
