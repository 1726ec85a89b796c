"""What became of each prompt: the turn handle every delivery returns.

python examples/turn_handles.py [DATA_DIR]

A prompt is followed from its claim to disk; a prompt and a steer given
together are claimed by one turn; a prompt cancelled before any turn claimed
it never ran.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from tether import NeverRan, NotStoredError, Tether, TurnEnded, UserMessage


async def main(data_dir: Path) -> None:
    async with Tether(data_dir=data_dir) as tether:
        handle = await tether.agents.create(cwd=str(Path.cwd()))
        agent = handle.agent

        first = agent.followup(UserMessage.text("hello"))
        print("claimed by turn", (await first.claimed()).turn)
        try:
            ended = await first.durable()  # its turn ended, and is on disk
        except NotStoredError as exc:
            print("not stored:", exc)
            return
        assert isinstance(ended, TurnEnded)
        print("ended:", ended.reason.kind, "|", ended.answer.splitlines()[0])

        together = agent.followup(UserMessage.text("a prompt"))
        steer = agent.steer(UserMessage.text("and a steer"))
        print("same turn:", await together.claimed() == await steer.claimed())
        await together.ended()

        taken_back = agent.followup(UserMessage.text("never mind"))
        agent.cancel()
        outcome = await taken_back.ended()
        assert isinstance(outcome, NeverRan)
        print("never ran, cancelled by", outcome.cause.value)

        await handle.dispose()


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(target))
