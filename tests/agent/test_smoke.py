from tests.agent.world import World, say
from tether.agent import UserMessage


async def test_one_followup_is_one_completed_turn(world: World) -> None:
    handle = await world.get("agents").create(cwd="/tmp")
    world.model.queue(say("hello there"))
    handle.agent.followup(UserMessage.text("hi"))
    await handle.agent.when_idle()
    types = [e.type for e in handle.agent.session.events]
    assert types[0] == "agent/inbox/spliced"
    assert types[-1] == "turn/end"
    assert handle.agent.session.events[-1].data["reason"]["kind"] == "completed"
    await handle.dispose()
