"""Managing an agent through its handle: create, prompt, cancel, dispose.

python examples/handles.py [DATA_DIR]
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from tether.agent import UserMessage
from tether.host import Tether


async def main(data_dir: Path) -> None:
    async with Tether(data_dir=data_dir) as tether:
        handle = await tether.agents.create(cwd=str(Path.cwd()))
        agent = handle.agent
        print(f"created agent {agent.id}")

        agent.followup(UserMessage.text("first question"))
        await agent.when_idle()
        print("first turn:", agent.session.events[-1].data["reason"])

        agent.followup(UserMessage.text("a question we change our mind about"))
        agent.cancel()
        await agent.when_idle()
        print("cancelled before it ran; turns so far:", agent.session.last_turn)

        await handle.dispose()
        print("disposed; live agents:", len(tether.agents.list()))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(target))
