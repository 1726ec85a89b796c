"""Headers and events in the shape the session layer hands to a log backend."""

from __future__ import annotations

from tether.persist.backends import StoredLog

BASE_TIME = 1_700_000_000.0


def header(
    session_id: str = "s1",
    *,
    created_at: float = BASE_TIME,
    cwd: str = "/home/user/project",
    lineage: dict[str, object] | None = None,
    meta: dict[str, str] | None = None,
) -> dict[str, object]:
    return {
        "id": session_id,
        "created_at": created_at,
        "cwd": cwd,
        "lineage": lineage,
        "meta": meta or {},
    }


def event(
    seq: int,
    type: str = "assistant/chunk",
    *,
    time: float | None = None,
    data: dict[str, object] | None = None,
) -> dict[str, object]:
    return {
        "type": type,
        "seq": seq,
        "time": BASE_TIME + seq if time is None else time,
        "data": {"delta": f"chunk {seq}"} if data is None else data,
    }


def user_message(seq: int, *texts: str, time: float | None = None) -> dict[str, object]:
    content = [{"type": "text", "text": text} for text in texts]
    return event(
        seq, "user/message", time=time, data={"id": f"m{seq}", "source": "user", "content": content}
    )


def turn_start(seq: int, *, time: float | None = None) -> dict[str, object]:
    return event(seq, "turn/start", time=time, data={})


def events(start: int, count: int) -> list[dict[str, object]]:
    return [event(seq) for seq in range(start, start + count)]


def records(log: StoredLog) -> list[dict[str, object]]:
    """The events of a loaded log as the plain dicts they were written from."""
    return [event.to_record() for event in log.events]
