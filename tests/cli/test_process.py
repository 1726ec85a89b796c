"""The tether process's start-up: the garbage collector is paused, then always resumed."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.cli.boot import UsageError, start
from tether.cli.main import build_parser
from tether.cli.process import begin_startup, end_startup


@pytest.fixture
def collector() -> Iterator[None]:
    yield
    end_startup()
    gc.unfreeze()
    gc.enable()


def test_the_collector_is_paused_then_resumed_with_the_start_up_heap_frozen(
    collector: None,
) -> None:
    begin_startup()
    assert not gc.isenabled()
    end_startup()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_end_startup_leaves_a_collector_it_did_not_pause_alone(collector: None) -> None:
    gc.disable()  # the embedding program's choice
    end_startup()
    assert not gc.isenabled()


async def test_start_up_ends_even_when_tether_fails_to_boot(
    collector: None, tmp_path: Path
) -> None:
    args = build_parser().parse_args(
        ["--data-dir", str(tmp_path), "--config", str(tmp_path / "missing.yml"), "run", "x"]
    )
    begin_startup()
    with pytest.raises(UsageError, match="no such file"):
        await start(args, model=None)
    assert gc.isenabled()
