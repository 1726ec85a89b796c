"""The session store transaction: prepare, enter, announce, detach."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from tether.runtime import Context, Notice, Runtime
from tether.session import TurnStart
from tether.session.log import Session
from tether.session.store import (
    SESSION_CREATED,
    SESSION_DISPOSED,
    SESSION_EVENT,
    SESSIONS,
    SessionConflictError,
    SessionStore,
)
from tether.session.store import apply as store_plugin


@pytest.fixture
async def root() -> AsyncIterator[Context]:
    """The root context of a runtime with the session store mounted."""
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        yield runtime.ctx


@pytest.fixture
def store(root: Context) -> SessionStore:
    sessions = root.get(SESSIONS)
    assert sessions is not None
    return sessions


def heard(root: Context, event: Notice[...]) -> list[object]:
    seen: list[object] = []
    root.on(event, lambda *args: seen.append(args))
    return seen


async def test_prepare_is_private_until_enter(root: Context, store: SessionStore) -> None:
    events = heard(root, SESSION_EVENT)
    session = store.prepare("s1", cwd="/tmp")
    session.append(TurnStart(turn=1))
    assert store.get("s1") is None and events == []
    store.enter(session)
    session.append(_end_turn())
    assert store.get("s1") is session
    assert [e.type for _s, e in events] == ["turn/end"]  # type: ignore[attr-defined]


async def test_enter_rejects_a_duplicate_live_id_and_the_loser_publishes_nothing(
    root: Context,
    store: SessionStore,
) -> None:
    created = heard(root, SESSION_CREATED)
    appended = heard(root, SESSION_EVENT)
    first, second = store.prepare("dup", cwd="/a"), store.prepare("dup", cwd="/b")
    store.enter(first)
    with pytest.raises(SessionConflictError, match="'dup' is already live"):
        store.enter(second)
    store.announce(first)
    second.append(TurnStart(turn=1))
    assert store.get("dup") is first
    assert created == [(first,)]
    assert appended == []
    with pytest.raises(SessionConflictError):
        store.prepare("dup")


async def test_concurrent_transactions_for_one_id_exactly_one_wins(store: SessionStore) -> None:
    async def transaction(cwd: str) -> Session | None:
        session = store.prepare("race", cwd=cwd)
        await asyncio.sleep(0)  # both prepare before either enters
        try:
            store.enter(session)
        except SessionConflictError:
            return None
        store.announce(session)
        return session

    results = await asyncio.gather(*(transaction(f"/{i}") for i in range(5)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert store.list() == winners


async def test_detach_emits_disposed_only_for_announced_sessions(
    root: Context, store: SessionStore
) -> None:
    disposed = heard(root, SESSION_DISPOSED)
    quiet = store.prepare("quiet")
    store.enter(quiet)
    store.detach(quiet)
    loud = store.prepare("loud")
    store.enter(loud)
    store.announce(loud)
    store.detach(loud)
    store.detach(loud)
    assert disposed == [(loud,)]
    assert store.list() == []


async def test_a_stale_detach_never_removes_a_newer_session(store: SessionStore) -> None:
    old = store.prepare("same")
    store.enter(old)
    store.announce(old)
    store.detach(old)
    new = store.prepare("same")
    store.enter(new)
    store.detach(old)
    assert store.get("same") is new


async def test_detach_during_created_dispatch_is_deferred(
    root: Context, store: SessionStore
) -> None:
    order: list[str] = []

    def on_created(session: Session) -> None:
        store.detach(session)
        order.append(f"first listener; live={store.get(session.id) is session}")

    root.on(SESSION_CREATED, on_created)
    root.on(
        SESSION_CREATED,
        lambda s: order.append(f"second listener; live={store.get(s.id) is s}"),
    )
    root.on(SESSION_DISPOSED, lambda s: order.append("disposed"))
    session = store.prepare("deferred")
    store.enter(session)
    store.announce(session)
    assert order == ["first listener; live=True", "second listener; live=True", "disposed"]
    assert store.get("deferred") is None


async def test_appends_publish_session_event_and_observer_errors_are_contained(
    root: Context,
    store: SessionStore,
) -> None:
    seen = heard(root, SESSION_EVENT)

    def broken(session: Session, event: object) -> None:
        raise RuntimeError("listener bug")

    root.on(SESSION_EVENT, broken)
    session = store.prepare()
    store.enter(session)
    event = session.append(TurnStart(turn=1))
    assert seen == [(session, event)]
    assert len(session.events) == 1


async def test_seeded_session_records_its_lineage(store: SessionStore) -> None:
    parent = store.prepare("parent")
    parent.append(TurnStart(turn=1))
    parent.append(_end_turn())
    child = store.prepare("child", seed=parent)
    assert child.header.lineage is not None
    assert (child.header.lineage.parent, child.header.lineage.seed_length) == ("parent", 2)
    assert [e.type for e in child.events] == ["turn/start", "turn/end"]
    assert child.last_turn == 1


def _end_turn():  # type: ignore[no-untyped-def]
    from tether.session import Completed, TurnEnd

    return TurnEnd(turn=1, reason=Completed())
