from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend

BACKENDS: dict[str, Callable[[Path], LogBackend]] = {
    "jsonl": JsonlBackend,
    "sqlite": SqliteBackend,
}


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture(params=sorted(BACKENDS))
def open_backend(
    request: pytest.FixtureRequest, store_root: Path
) -> Iterator[Callable[[], LogBackend]]:
    """Opens backends of one kind on one root; each stands for a separate writer."""
    opened: list[LogBackend] = []

    def open_() -> LogBackend:
        backend = BACKENDS[request.param](store_root)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(open_backend: Callable[[], LogBackend]) -> LogBackend:
    return open_backend()
