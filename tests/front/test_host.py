"""The session host and the question asker, once for every front end: what they own,
how they let go, where a call is asked, and how a question always ends."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from tether.agent.registry import AGENTS
from tether.front.asking import Answer, PermissionDecision, Question, ask
from tether.front.host import SessionHost
from tether.runtime.schema import Schema
from tether.runtime.signal import CancelSignal
from tether.session import Session, SessionHeader
from tether.session.lineage import Delegation, Lineage
from tether.session.settings import PermissionGranted
from tether.tools.definition import Tool, ToolExec
from tether.tools.execute import ToolInvocation
from tether.tools.permission import Mode
from tether.tools.preview import ToolPreview


class Agent:
    """What the host reads of an agent: its id and its session."""

    def __init__(self, session_id: str, parent: str | None = None) -> None:
        lineage = (
            None
            if parent is None
            else Lineage(parent, 0, Delegation(call="c0", depth=1, task="a child"))
        )
        self.id = session_id
        self.session = Session(SessionHeader(session_id, 1_700_000_000.0, "/tmp", lineage))


class Handle:
    """A published session: its agent, and a dispose that records it was run."""

    def __init__(self, agent: Agent, disposed: list[str]) -> None:
        self.agent = agent
        self._disposed = disposed

    async def dispose(self) -> None:
        await asyncio.sleep(0)
        self._disposed.append(self.agent.id)


class Registry(dict[str, Agent]):
    pass


class Context:
    """The part of a plugin's context the host uses: the agents registry, ``serial``."""

    def __init__(self, registry: Registry, serial: Any = None) -> None:
        self._registry = registry
        self.serial = serial

    def get(self, key: object) -> object:
        return self._registry if key is AGENTS else None


class Closed(Exception):
    pass


class Front:
    """A front end as the host sees it; it records what it was told."""

    expected = (Closed,)

    def __init__(self, answer: Answer = Answer.ONCE) -> None:
        self.answer = answer
        self.told: list[str] = []
        self.presented: list[Question] = []

    def refusal(self, opening: str | None) -> Closed:
        return Closed(f"closing ({opening})")

    def governs(self, agent: Any) -> bool:
        return True

    def mode(self, governing: Any) -> Mode:
        return Mode.ASK

    def previewed(self, governing: Any, agent: Any, call_id: str, preview: Any) -> None:
        self.told.append(f"previewed {agent.id}/{call_id} in {governing.id}")

    def started(self, governing: Any, agent: Any, call_id: str) -> None:
        self.told.append(f"started {agent.id}/{call_id}")

    async def present(self, question: Question) -> Answer:
        self.presented.append(question)
        return self.answer

    def on_forgotten(self, agent: Any) -> None:
        self.told.append(f"forgot {agent.id}")

    def on_closing(self) -> None:
        self.told.append("closing")

    def on_closed(self, disposed: int) -> None:
        self.told.append(f"closed {disposed}")


def _host(front: Front, registry: Registry | None = None, **kw: Any) -> SessionHost[Any]:
    ctx = Context(registry if registry is not None else Registry(), **kw)
    return SessionHost(ctx, front, answer_within=5.0, name="test")  # type: ignore[arg-type]


class Call(msgspec.Struct, frozen=True):
    """What the host and the asker read of a tool call."""

    tool_name: str
    exec: ToolExec
    preview_of: ToolPreview | None = None
    args: dict[str, object] = msgspec.field(default_factory=dict)
    tool: None = None

    @property
    def shown_args(self) -> dict[str, object]:
        return self.args

    async def preview(self) -> ToolPreview | None:
        return self.preview_of


class NoArgs(Schema, frozen=True):
    """The arguments of a tool that takes none."""


def _call(agent: Agent, tool: str = "bash", preview: ToolPreview | None = None) -> Call:
    exec_ = ToolExec(agent=None, call_id="c1", signal=CancelSignal(), cwd=None)
    msgspec.structs.force_setattr(exec_, "agent", agent)
    return Call(tool, exec_, preview)


async def test_a_session_published_while_the_host_closes_is_disposed_and_refused() -> None:
    disposed: list[str] = []
    front = Front()
    host = _host(front)
    kept = await host.publish(Handle(Agent("s1"), disposed))
    closing = host.close()
    with pytest.raises(Closed, match="s2"):
        await host.publish(Handle(Agent("s2"), disposed))
    await closing
    assert sorted(disposed) == ["s1", "s2"] and host.sessions == []
    assert front.told == ["closing", "closed 1"] and kept.agent.id == "s1"


async def test_close_is_one_run_that_awaits_owned_work_and_refuses_new_work() -> None:
    front = Front()
    host = _host(front)
    release = asyncio.Event()
    finished: list[str] = []

    async def work() -> None:
        await release.wait()
        finished.append("work")

    host.spawn(work())
    first, second = host.close(), host.close()
    refused = work()
    with pytest.raises(Closed):
        host.spawn(refused)
    release.set()
    await asyncio.gather(first, second)
    assert finished == ["work"] and front.told == ["closing", "closed 0"]


async def test_a_session_disposed_by_another_owner_is_forgotten_but_not_while_closing() -> None:
    front = Front()
    host = _host(front)
    one, two = Agent("s1"), Agent("s2")
    await host.publish(Handle(one, []))
    await host.publish(Handle(two, []))
    host.forget(Agent("s1"))  # another agent of the same id: not ours
    assert host.get("s1") is not None
    host.forget(one)
    assert host.get("s1") is None and front.told == ["forgot s1"]
    closing = host.close()
    host.forget(two)
    await closing
    assert front.told == ["forgot s1", "closing", "closed 1"]


async def test_a_childs_calls_are_governed_by_its_top_live_ancestor() -> None:
    root, child = Agent("root"), Agent("child", parent="root")
    grandchild = Agent("grandchild", parent="child")
    registry = Registry(root=root, child=child, grandchild=grandchild)
    host = _host(Front(), registry)
    assert host.governing(grandchild) is root
    assert host.governing(root) is root
    orphan = Agent("orphan", parent="gone")  # its parent is no longer live: it rules itself
    assert host.governing(orphan) is orphan


async def test_before_execute_previews_once_asks_in_the_governing_session_and_approves() -> None:
    root, child = Agent("root"), Agent("child", parent="root")
    front = Front()
    previews = 0

    async def counted(args: NoArgs, exec: ToolExec) -> ToolPreview:
        nonlocal previews
        previews += 1
        return ToolPreview(kind="execute", title="ls")

    async def never_run(args: NoArgs, exec: ToolExec) -> str:
        raise AssertionError("the host does not run the tool")

    host: SessionHost[Any]

    async def serial(key: object, agent: Agent, invocation: Any) -> PermissionDecision | None:
        return await host.ask(agent, invocation)

    host = _host(front, Registry(root=root, child=child), serial=serial)
    exec_ = _call(child).exec
    tool = Tool("bash", "Bash.", NoArgs, never_run, preview=counted)
    call = ToolInvocation("bash", {}, exec_, tool=tool)
    ran: list[bool] = []

    async def run(invocation: Any) -> Any:
        ran.append(invocation.exec.approved)
        return invocation

    await host.before_execute(call, run)  # type: ignore[arg-type]
    assert previews == 1 and ran == [True]
    assert front.told == ["previewed child/c1 in root", "started child/c1"]
    (question,) = front.presented
    assert question.governing is root and question.agent is child


async def test_always_keeps_a_rule_and_a_call_it_covers_is_allowed_unasked_and_logged() -> None:
    agent = Agent("s1")
    front = Front(Answer.ALWAYS)
    question = Question(agent, agent, _call(agent), None)  # type: ignore[arg-type]
    assert question.always.label == "Always allow bash"
    assert await ask(question, front.present, within=5) is PermissionDecision.ALLOW
    assert agent.session.settings.allowed == ("bash",)
    again = Question(agent, agent, _call(agent), None)  # type: ignore[arg-type]
    assert await ask(again, front.present, within=5) is PermissionDecision.ALLOW
    assert len(front.presented) == 1
    granted, ruled = agent.session.events
    assert granted.type == "permission/granted" and granted.data == {"rule": "bash"}
    assert ruled.type == "permission/ruled"
    assert ruled.data == {"call": "c1", "tool": "bash", "decision": "allow", "rules": ("bash",)}


async def test_always_is_not_logged_for_a_call_that_needs_approval_whatever_the_mode() -> None:
    agent = Agent("s1")
    preview = ToolPreview(kind="edit", title="w", approval="outside the workspace")
    question = Question(agent, agent, _call(agent, "write", preview), preview)  # type: ignore[arg-type]
    assert question.always.rules == ()
    assert question.always.why_not == "it needs approval every time (outside the workspace)"
    assert await ask(question, Front(Answer.ALWAYS).present, within=5) is PermissionDecision.ALLOW
    assert len(agent.session.events) == 0


async def test_an_unanswered_question_is_withdrawn_by_a_cancel_or_the_timeout() -> None:
    agent = Agent("s1")
    withdrawn: list[str] = []

    async def never(question: Question) -> Answer:
        try:
            await asyncio.Event().wait()
        finally:
            withdrawn.append(question.tool)
        raise AssertionError("unreachable")

    call = _call(agent)
    question = Question(agent, agent, call, None)  # type: ignore[arg-type]
    assert await ask(question, never, within=0.01) is PermissionDecision.REJECT
    asking = asyncio.ensure_future(ask(question, never, within=None))
    await asyncio.sleep(0)
    call.exec.signal.cancel("stop")
    assert await asking is PermissionDecision.REJECT
    assert withdrawn == ["bash", "bash"] and len(agent.session.events) == 0


async def test_a_presentation_that_fails_is_a_rejection() -> None:
    agent = Agent("s1")

    async def broken(question: Question) -> Answer:
        raise ConnectionError("the client went away")

    question = Question(agent, agent, _call(agent), None)  # type: ignore[arg-type]
    assert await ask(question, broken, within=5) is PermissionDecision.REJECT


async def test_a_kept_rule_that_cannot_be_read_allows_nothing_and_the_call_is_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent("s1")
    agent.session.append(PermissionGranted(rule="Bash(unclosed"))
    front = Front(Answer.REJECT)
    question = Question(agent, agent, _call(agent), None)  # type: ignore[arg-type]
    assert await ask(question, front.present, within=5) is PermissionDecision.REJECT
    assert len(front.presented) == 1
    assert "a kept permission rule is ignored" in caplog.text


async def test_an_older_logs_grant_of_every_edit_reads_as_the_edit_rule() -> None:
    agent = Agent("s1")
    agent.session.append(PermissionGranted(tool="kind:edit"))
    front = Front(Answer.REJECT)
    for tool, asked in (("write", 0), ("edit", 0), ("bash", 1)):
        question = Question(agent, agent, _call(agent, tool), None)  # type: ignore[arg-type]
        decision = PermissionDecision.REJECT if asked else PermissionDecision.ALLOW
        assert await ask(question, front.present, within=5) is decision
    assert [q.tool for q in front.presented] == ["bash"]
