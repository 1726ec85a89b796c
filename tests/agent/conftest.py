from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent.world import World, build_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path)
    try:
        yield built
    finally:
        await built.runtime.dispose()
