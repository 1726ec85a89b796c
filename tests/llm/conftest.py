from collections.abc import AsyncIterator

import pytest

from tether.runtime import Runtime


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        yield rt
