"""A model that repeats a tool-call id in one answer cannot fail the turn."""

from tests.agent.support import assert_balanced, last_reason
from tests.agent.world import World, calls, say
from tether.agent import UserMessage
from tether.llm import Finish, ToolCallBlock, ToolCallDelta, assemble


def test_duplicate_ids_in_one_answer_get_unique_ids_and_the_originals_are_recorded() -> None:
    result = assemble(
        [
            ToolCallDelta(0, "dup", "echo", '{"text": "a"}'),
            ToolCallDelta(1, "dup", "echo", '{"text": "b"}'),
            ToolCallDelta(2, "dup_2", "echo", '{"text": "c"}'),
            ToolCallDelta(3, "dup", "echo", "{broken"),
            Finish("tool-calls"),
        ]
    )
    ids = [block.id for block in result.message.tool_calls]
    assert ids == ["dup", "dup_2", "dup_2_2", "dup_3"]
    assert dict(result.renamed_calls) == {"dup_2": "dup", "dup_2_2": "dup_2", "dup_3": "dup"}
    assert list(result.invalid_calls) == ["dup_3"]
    assert result.message.tool_calls[1] == ToolCallBlock("dup_2", "echo", {"text": "b"})


def test_an_interrupted_answer_keeps_its_ids_unique_too() -> None:
    result = assemble(
        [
            ToolCallDelta(0, "x", "echo", '{"text": "a"}'),
            ToolCallDelta(1, "x", "echo", '{"text": "b"}'),
            Finish("aborted"),
        ]
    )
    assert [block.id for block in result.message.tool_calls] == ["x", "x_2"]


async def test_a_turn_with_duplicate_call_ids_runs_every_call_and_completes(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(
        calls(("c1", "echo", '{"text": "one"}'), ("c1", "echo", '{"text": "two"}')), say("done")
    )
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "completed"}
    results = [e.data for e in agent.session.events if e.type == "tool/result"]
    assert [(r["id"], r["content"]) for r in results] == [("c1", "one"), ("c1_2", "two")]
    assert world.executed == ["echo:one", "echo:two"]
    assert_balanced(agent.session)


def test_renamed_ids_keep_the_characters_providers_accept() -> None:
    import re

    from tether.llm.assemble import Assembler
    from tether.llm.chunks import Finish, ToolCallDelta

    assembler = Assembler()
    for index in range(3):
        assembler.feed(ToolCallDelta(index, "toolu_01AbC-9", "echo", '{"text": "x"}'))
    assembler.feed(Finish("tool-calls"))
    ids = [block.id for block in assembler.result().message.tool_calls]
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", given) for given in ids)
