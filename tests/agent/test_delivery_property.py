"""Property: under any interleaving of input, cancels and a dispose, nothing is lost or revived.

An agent whose loop has asynchronous hooks (pre-step, turn-stop,
request-error) and tools that take a random number of scheduler turns is
driven by a random sequence of ``followup`` / ``steer`` / ``inject`` /
``cancel(user|parent)`` / ``dispose``. Afterwards, at true quiescence:

* every message accepted after the last cancel ran exactly once (an
  ``inject`` may instead still be pending: it wakes nothing);
* no message accepted before a cancel ran after it;
* no message ran twice;
* every turn closed, the log is balanced, and each turn a cancel hit ended
  ``aborted`` with that cancel's cause, whatever a hook, a model error or the
  step limit would have said (the other turns end as those said);
* what the log holds in memory is what is on disk.

All waiting is done in scheduler turns, so a run depends only on its seed.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from pydantic import BaseModel

from tests.agent.support import assert_balanced, on_disk
from tests.agent.world import Script, build_world
from tether.agent import Agent, CancelCause, UserMessage
from tether.agent.events import CANCEL_REQUESTED
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.loop.hooks import PRE_STEP, REQUEST_ERROR, TURN_STOP
from tether.runtime import CancelSignal
from tether.session import Blocked, TurnEndReason, replay_inbox
from tether.tools import Tool, ToolExec, ToolOutput


async def _yield(turns: int) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


POINTS = ("pre-step", "turn-stop", "request-error", "tool", "stream")
"""Where the loop waits on a hook, a tool or the model: where a cancel bites hardest."""


@dataclass
class Reached:
    """Which points the loop has reached since the scenario last asked."""

    seen: set[str] = field(default_factory=set)

    def mark(self, point: str) -> None:
        self.seen.add(point)

    async def until(self, point: str, *, within: int = 200) -> None:
        """Let the scheduler run until ``point`` is next reached (at most ``within`` turns)."""
        self.seen.discard(point)
        for _ in range(within):
            if point in self.seen:
                return
            await asyncio.sleep(0)


class NapArgs(BaseModel):
    turns: int


REACHED = Reached()


async def _nap(args: NapArgs, exec: ToolExec) -> ToolOutput:
    REACHED.mark("tool")
    for _ in range(args.turns):
        if exec.signal.cancelled:
            return ToolOutput("nap stopped by cancel", is_error=True)
        await asyncio.sleep(0)
    return ToolOutput("rested")


def _scripts(rng: random.Random, count: int) -> list[Script]:
    """Model answers: text, tool calls, or a failure."""
    scripts: list[Script] = []
    for index in range(count):
        kind = rng.choice(["text", "tools", "tools", "fail"])
        scripts.append(_answer(kind, index, rng.randrange(4), rng.randrange(6)))
    return scripts


def _answer(kind: str, index: int, pace: int, nap: int) -> Script:
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        if kind == "fail":
            yield Finish("error", error="529 overloaded", error_code="overloaded")
            return
        for piece in range(2):
            REACHED.mark("stream")
            await _yield(pace)
            yield TextDelta(f"a{index}.{piece} ")
        if kind == "tools":
            yield ToolCallDelta(index=0, id=f"e{index}", name="echo", args_delta='{"text": "x"}')
            yield ToolCallDelta(
                index=1, id=f"n{index}", name="nap", args_delta=f'{{"turns": {nap}}}'
            )
            yield Finish("tool-calls")
        else:
            yield Finish("stop")

    return script


@dataclass
class Observed:
    """What the scenario saw while it ran."""

    accepted: list[tuple[str, str, int]] = field(default_factory=list)
    """(message id, how it was sent, effective cancels before it)."""
    cancels: list[tuple[int, CancelCause, int | None]] = field(default_factory=list)
    """(log length when requested, cause, the turn it hit if one was running)."""
    blocked: set[int] = field(default_factory=set)
    """Turns a turn-stop listener ended ``blocked``."""
    gave_up: set[int] = field(default_factory=set)
    """Turns whose failed request the request-error listener did not retry."""


def _hooks(agent: Agent, rng: random.Random, observed: Observed) -> None:
    ctx = agent.ctx
    pre_step_pace = [rng.randrange(4) for _ in range(64)]
    stop_pace = [rng.randrange(16) for _ in range(64)]
    stop_says = [rng.randrange(8) == 0 for _ in range(64)]
    give_up = [rng.randrange(4) == 0 for _ in range(64)]

    async def pre_step(messages, next_, a, step):  # type: ignore[no-untyped-def]
        REACHED.mark("pre-step")
        await _yield(pre_step_pace[step % 64])
        return await next_(messages)

    async def turn_stop(a: Agent, turn: int, step: int) -> TurnEndReason | None:
        REACHED.mark("turn-stop")
        await _yield(stop_pace[(turn + step) % 64])
        if stop_says[(turn + step) % 64]:
            observed.blocked.add(turn)
            return Blocked()
        return None

    async def request_error(error, next_, a):  # type: ignore[no-untyped-def]
        REACHED.mark("request-error")
        await _yield(1)
        decided = await next_(error)
        retry = not give_up[(a.session.last_turn + error.attempt) % 64]
        if not retry:
            observed.gave_up.add(a.session.last_turn)
        return replace(decided, retry=retry, delay=0.0)

    def on_cancel(a: Agent, cause: CancelCause) -> None:
        turn = a.session.open_turn
        observed.cancels.append((len(a.session.events), cause, turn))

    ctx.on(PRE_STEP, pre_step)
    ctx.on(TURN_STOP, turn_stop)
    ctx.on(REQUEST_ERROR, request_error)
    ctx.on(CANCEL_REQUESTED, on_cancel)


WAIT = st.one_of(
    st.integers(min_value=0, max_value=12),  # let the scheduler run this many turns
    st.sampled_from([f"until-{point}" for point in POINTS]),
)
ACTION = st.sampled_from(["followup", "steer", "inject", "cancel-user", "cancel-parent"])
ROUNDS = st.lists(st.tuples(WAIT, st.lists(ACTION, max_size=3)), max_size=6)
"""Rounds of (a wait, then actions done at once): a cancel and the input typed right
after it land in the same instant of the loop, as a person's Esc-and-retype does."""


Round = tuple[int | str, list[str]]


async def scenario(data_dir: Path, rounds: list[Round], seed: int, dispose: bool) -> None:
    rng = random.Random(seed)
    REACHED.seen.clear()
    world = await build_world(data_dir, loop_config={"max_steps": 3})
    try:
        await world.get("tools").register(Tool("nap", "Nap.", NapArgs, _nap))
        world.model.queue(*_scripts(rng, 200))
        handle = await world.get("agents").create("prop", cwd="/w")
        agent = handle.agent
        observed = Observed()
        _hooks(agent, rng, observed)
        for wait, actions in rounds:
            if isinstance(wait, int):
                await _yield(wait)
            else:
                await REACHED.until(wait.removeprefix("until-"))
            for action in actions:
                if action.startswith("cancel-"):
                    agent.cancel(CancelCause(action.removeprefix("cancel-")))
                    continue
                message = UserMessage.text(f"{action}{len(observed.accepted)}")
                getattr(agent, action)(message)
                observed.accepted.append((message.id, action, len(observed.cancels)))
        if dispose:
            await handle.dispose()
        await asyncio.wait_for(agent.when_idle(), timeout=10)
        _check(agent, observed, disposed=dispose)
        await world.get("sessions").flush(agent.session)
        if agent.session.events:
            assert len(on_disk(data_dir, agent)) == len(agent.session.events)
        if not dispose:
            await handle.dispose()
    finally:
        await world.runtime.dispose()


def _check(agent: Agent, observed: Observed, *, disposed: bool) -> None:
    session = agent.session
    assert_balanced(session)
    ran: dict[str, list[int]] = {}
    for event in session.events:
        if event.type == "user/message":
            ran.setdefault(str(event.data["id"]), []).append(event.seq)
    assert all(len(seqs) == 1 for seqs in ran.values()), ran
    cancel_seqs = [seq for seq, _cause, _turn in observed.cancels]
    pending = {m.id for m in replay_inbox(session.events).steering}
    pending |= {m.id for m in replay_inbox(session.events).queued}
    for message_id, how, epoch in observed.accepted:
        if epoch < len(cancel_seqs):
            # Accepted before cancel number ``epoch + 1``: it ran before it, or never.
            assert all(seq < cancel_seqs[epoch] for seq in ran.get(message_id, [])), (
                message_id,
                how,
            )
        elif not disposed:
            if how == "inject":
                assert message_id in ran or message_id in pending, (message_id, how)
            else:
                assert message_id in ran, (message_id, how)
    ends = {
        int(event.data["turn"]): dict(event.data["reason"])  # type: ignore[call-overload]
        for event in session.events
        if event.type == "turn/end"
    }
    steps: dict[int, int] = {}
    calling: dict[int, bool] = {}  # did the turn's last answer call tools?
    current = 0
    for event in session.events:
        if event.type == "step/start":
            current = int(event.data["turn"])  # type: ignore[call-overload]
            steps[current] = steps.get(current, 0) + 1
        elif event.type == "assistant/message":
            content = event.data["content"]
            calling[current] = any(b["type"] == "tool_call" for b in content)  # type: ignore[attr-defined, index]
    hit: dict[int, str] = {}
    for _seq, cause, turn in observed.cancels:
        if turn is not None:
            hit.setdefault(turn, str(cause))  # a turn's first cancel is the one it ends with
    last_turn = max(ends, default=0)
    for turn, reason in ends.items():
        if turn in hit:
            assert reason == {"kind": "aborted", "cause": hit[turn]}, (turn, reason)
        elif disposed and turn == last_turn and reason["kind"] == "aborted":
            assert reason == {"kind": "aborted", "cause": "disposed"}
        elif turn in observed.blocked:
            assert reason == {"kind": "blocked"}, (turn, reason)
        elif turn in observed.gave_up:
            assert reason == {
                "kind": "error",
                "error": "529 overloaded",
                "code": "overloaded",
            }, (turn, reason)
        elif reason["kind"] == "error":
            assert reason["error"] == "the turn reached its limit of 3 steps", (turn, reason)
            assert steps[turn] == 3, (turn, steps[turn])
        else:
            assert reason == {"kind": "completed"}, (turn, reason)
            # A turn whose last answer called tools was owed another step.
            assert not calling.get(turn, False), (turn, "completed with tools owed a reply")


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(rounds=ROUNDS, seed=st.integers(min_value=0, max_value=2**16), dispose=st.booleans())
def test_no_input_is_lost_or_revived_by_any_interleaving_of_cancels(
    rounds: list[Round], seed: int, dispose: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp), rounds, seed, dispose))
