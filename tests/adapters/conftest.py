from collections.abc import AsyncIterator

import pytest

from tests.adapters.fake_server import FakeServer
from tether.runtime import Runtime


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        yield rt
