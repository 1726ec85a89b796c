"""A property of delegation: over random trees of child agents (depth <= 3) and a random
stop, no agent leaks, every log is balanced, and every turn ends with the right cause."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent.world import World, build_world
from tether.agent import Agent, AgentStatus, UserMessage
from tether.content import ToolMessage, UserRoleMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.persist.backends import JsonlBackend
from tether.runtime import CancelSignal, Context
from tether.runtime.compose import PluginRow


@dataclass
class Node:
    id: str
    background: bool
    children: list[Node] = field(default_factory=list)

    def spec(self) -> str:
        return json.dumps(self.to_data())

    def to_data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "background": self.background,
            "children": [c.to_data() for c in self.children],
        }

    def walk(self) -> list[Node]:
        return [self, *(n for c in self.children for n in c.walk())]


Shape = tuple[bool, tuple["Shape", ...]]
"""A node drawn by hypothesis: whether it runs in the background, and its children."""


def shapes(depth: int = 0) -> st.SearchStrategy[Shape]:
    kids = st.lists(shapes(depth + 1), max_size=2).map(tuple) if depth < 3 else st.just(())
    return st.tuples(st.booleans(), kids)


def numbered(shape: Shape) -> Node:
    """A fresh tree of ``shape``, its nodes named n0, n1, … depth first."""
    counter = iter(range(1000))

    def build(part: Shape) -> Node:
        node = Node(f"n{next(counter)}", part[0])
        node.children = [build(child) for child in part[1]]
        return node

    return build(shape)


class TreeModel:
    """Answers from the spec in the prompt: a node with children delegates one task per
    child; a leaf waits on its gate; anything else (a notice, tool results) is noted."""

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        last = request.messages[-1]
        spec: dict[str, Any] | None = None
        if isinstance(last, UserRoleMessage):
            text = "".join(getattr(b, "text", "") for b in last.content)
            if text.startswith("{"):
                spec = json.loads(text)
        if spec is None or isinstance(last, ToolMessage):
            yield TextDelta("noted")
            yield Finish("stop")
            return
        if not spec["children"]:
            arguments = json.dumps({"key": spec["id"]})
            yield ToolCallDelta(index=0, id=f"w-{spec['id']}", name="wait", args_delta=arguments)
        for index, child in enumerate(spec["children"]):
            arguments = json.dumps(
                {
                    "description": child["id"],
                    "prompt": json.dumps(child),
                    "run_in_background": child["background"],
                }
            )
            yield ToolCallDelta(
                index=index, id=f"t-{child['id']}", name="task", args_delta=arguments
            )
        yield Finish("tool-calls")


async def tree_world(tmp_path: Path) -> World:
    world = await build_world(tmp_path)

    async def tree_model(ctx: Context, config: None) -> None:
        await ctx.llm.register("tree", TreeModel())

    tree_model.inject = ("llm",)  # type: ignore[attr-defined]
    await world.ctx.plugin(tree_model)
    row = PluginRow(
        id="tool_subagent",
        plugin="tether.plugins.tool_subagent",
        config={"max_depth": 3, "max_children": 8, "profiles": {}},
    )
    report = await world.composer.apply([row])
    assert report.ok, report.problems
    return world


def by_node(world: World) -> dict[str, Agent]:
    found = {}
    for agent in world.get("agents").list():
        delegation = agent.session.header.delegation
        if delegation is not None:
            found[delegation.task] = agent
    return found


def balanced(world: World, session_id: str) -> list[dict[str, Any]]:
    """The stored turn/end reasons of a session, checked to close every turn."""
    log = JsonlBackend(world.data_dir).load(session_id)
    starts = sum(1 for e in log.events if e.type == "turn/start")
    ends = [e.data_object()["reason"] for e in log.events if e.type == "turn/end"]
    assert starts == len(ends), (session_id, starts, ends)
    return ends


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=shapes(),
    action=st.sampled_from(["cancel-root", "dispose-root", "cancel-node", "release"]),
    pick=st.integers(0, 100),
)
def test_random_trees_stop_whole_and_leave_nothing_behind(
    tmp_path_factory: Any, shape: Shape, action: str, pick: int
) -> None:
    asyncio.run(_scenario(tmp_path_factory.mktemp("tree"), numbered(shape), action, pick))


async def _scenario(path: Path, root: Node, action: str, pick: int) -> None:
    world = await tree_world(path)
    try:
        from tether.agent import AgentOptions

        handle = await world.get("agents").create(cwd="/", options=AgentOptions(model="tree"))
        top = handle.agent
        top.followup(UserMessage.text(root.spec()))
        leaves = [n for n in root.walk() if not n.children]
        for leaf in leaves:
            reached, _release = world.gates.get(leaf.id)
            await asyncio.wait_for(reached.wait(), 10)
        agents = {"n0": top, **by_node(world)}
        assert set(agents) == {n.id for n in root.walk()}
        ids = {name: agent.id for name, agent in agents.items()}
        parents = {c.id: n.id for n in root.walk() for c in n.children}

        def under(name: str, ancestor: str) -> bool:
            while name in parents:
                name = parents[name]
                if name == ancestor:
                    return True
            return False

        running = {name: agent.status is AgentStatus.RUNNING for name, agent in agents.items()}
        stopped: str | None = None
        cause = "user"
        if action == "release":
            for leaf in leaves:
                world.gates.get(leaf.id)[1].set()
        elif action == "cancel-root":
            stopped = "n0"
            top.cancel()
        elif action == "cancel-node":
            names = sorted(agents)
            stopped = names[pick % len(names)]
            agents[stopped].cancel()
        else:
            stopped, cause = "n0", "disposed"
        if action != "dispose-root":
            # What the stop reached comes to rest; the rest waits for the disposal.
            # (A cancel of an idle agent stops nothing, as for its background
            # bash tasks: its background children run on until disposed.)
            reached_by_stop = [
                agent
                for name, agent in agents.items()
                if stopped is None
                or (running[stopped] and (name == stopped or under(name, stopped)))
            ]
            for agent in reached_by_stop:
                await asyncio.wait_for(agent.when_idle(), 10)
        await asyncio.wait_for(handle.dispose(), 10)
        # Nothing is left: no agent, no live session.
        assert world.get("agents").list() == []
        assert world.get("sessions").list() == []
        for name, session_id in ids.items():
            ends = balanced(world, session_id)
            if stopped is None:
                assert ends[0] == {"kind": "completed"}, (name, ends)
            elif not running[name]:
                # Idle when the stop came (its children run in the background).
                assert ends[0] == {"kind": "completed"}, (name, ends)
            elif name == stopped:
                assert ends[0] == {"kind": "aborted", "cause": cause}, (name, ends)
            elif under(name, stopped) or (action == "dispose-root"):
                assert ends[0] == {"kind": "aborted", "cause": "parent"}, (name, ends)
    finally:
        await world.runtime.dispose()
