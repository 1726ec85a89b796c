from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.runtime import Fiber, Runtime
from tether.shell import LocalShell
from tether.shell import local as shell_plugin
from tether.shell.definition import SHELL

GRACE_MS = 200


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with Runtime() as rt:
        yield rt


@pytest.fixture
def spill_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "spill"
    parent.mkdir()
    return parent


@pytest.fixture
async def shell_fiber(runtime: Runtime, spill_parent: Path, tmp_path: Path) -> Fiber:
    config = {"kill_grace_ms": GRACE_MS, "spill_dir": str(spill_parent), "cwd": str(tmp_path)}
    return await runtime.ctx.plugin(shell_plugin, config)


@pytest.fixture
def shell(runtime: Runtime, shell_fiber: Fiber) -> LocalShell:
    service = runtime.ctx.get(SHELL)
    assert isinstance(service, LocalShell)
    return service
