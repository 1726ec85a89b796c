from collections.abc import AsyncIterator, Iterator

import pytest

from tests.adapters.fake_server import FakeServer
from tether.runtime import Runtime
from tether.session.events import DEFAULT_REGISTRY


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        yield rt


@pytest.fixture(autouse=True)
def _restore_default_registry() -> Iterator[None]:
    """Leave the process-wide event registry as these tests found it.

    The retry plugin declares ``llm/retry`` ignorable, and by design the
    declaration outlives the plugin (logs holding the type keep loading);
    tests elsewhere expect a registry that has never seen it.
    """
    ignorable = set(DEFAULT_REGISTRY._ignorable)
    yield
    DEFAULT_REGISTRY._ignorable.intersection_update(ignorable)
