"""A custom plugin: a ``word_count`` tool, loaded from a YAML overlay.

    tether --config examples/word_count/tether.yml run '/tool word_count {"text": "one two three"}'

(The offline model calls any tool with ``/tool NAME {json}``.)
"""

from pydantic import BaseModel, Field

from tether.runtime import Context
from tether.tools import Tool, ToolExec, ToolOutput
from tether.tools.registry import TOOLS

name = "word_count"
inject = (TOOLS,)


class Args(BaseModel):
    text: str = Field(description="the text to count")


async def count(args: Args, exec: ToolExec) -> ToolOutput:
    words = len(args.text.split())
    return ToolOutput(f"{words} words, {len(args.text)} characters")


async def apply(ctx: Context, config: None) -> None:
    await ctx.service(TOOLS).register(
        Tool(name="word_count", description="Count the words in a text.", args=Args, execute=count)
    )
