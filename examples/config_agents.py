"""Agents from configuration: a program that never touches an AgentHandle.

The agent loop's config lists an agent; tether creates it at start and owns
it (it is disposed when tether stops). The program finds it by its session
id, prompts it, and prints the answer. Runs offline, on the scripted model.

    python examples/config_agents.py [DATA_DIR]
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from tether.agent import UserMessage
from tether.host import Tether
from tether.session import derive_messages

OVERLAY = {
    "plugins": [
        {
            "id": "agent_loop",
            "config": {
                "model": "offline",
                "agents": [{"name": "greeter", "session_id": "greeter"}],
            },
        }
    ]
}


async def main(data_dir: Path) -> None:
    async with Tether(overlays=[OVERLAY], data_dir=data_dir) as tether:
        agent = tether.agents.get("greeter")
        assert agent is not None, tether.problems
        agent.followup(UserMessage.text("hello from a program"))
        await agent.when_idle()
        answer = derive_messages(agent.session)[-1]
        print(f"greeter answered: {answer.content[0].text}")  # type: ignore[union-attr]


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(target))
