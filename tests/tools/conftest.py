from collections.abc import AsyncIterator

import pytest

from tether.runtime import Runtime
from tether.tools import ToolRegistry
from tether.tools import registry as tools_plugin
from tether.tools.registry import TOOLS


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        await rt.ctx.plugin(tools_plugin)
        yield rt


@pytest.fixture
def registry(runtime: Runtime) -> ToolRegistry:
    tools = runtime.ctx.get(TOOLS)
    assert isinstance(tools, ToolRegistry)
    return tools
