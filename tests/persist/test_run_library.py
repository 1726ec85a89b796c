"""``tether.cluster.submit``: a program submits runs and holds each as a value.

The program is a :class:`~tether.Tether` on the PostgreSQL queue; a real
``tether worker`` process runs what it submits.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.persist.test_run_queue import Fleet, stop
from tether import Tether


@pytest.mark.timeout(120)
async def test_a_program_submits_a_run_and_awaits_its_settlement(
    fleet: Fleet, tmp_path: Path
) -> None:
    async with Tether(overlays=[fleet.overlay], data_dir=tmp_path / "program") as tether:
        run = await tether.cluster.submit("append a line", cwd=tmp_path, model="effect")
        queued = await run.status()
        assert (queued.state, queued.task, queued.cwd) == ("queued", "append a line", str(tmp_path))
        worker = fleet.worker("w1")
        try:
            async with asyncio.timeout(60):
                settled = await run.settled()
        finally:
            stop(worker)
        assert (settled.state, settled.worker) == ("done", f"w1:{worker.pid}")
        session = await tether.persistence.load(run.session_id)
        assert [e.type for e in session.events].count("turn/end") == 1


@pytest.mark.timeout(60)
async def test_a_queued_run_cancelled_by_its_handle_is_never_taken(
    fleet: Fleet, tmp_path: Path
) -> None:
    async with Tether(overlays=[fleet.overlay], data_dir=tmp_path / "program") as tether:
        run = await tether.cluster.submit("never", cwd=tmp_path, priority=3)
        await run.cancel()
        assert (await run.settled()).state == "cancelled"
        await run.cancel()  # settled: left as it is
        assert (await run.status()).outcome == "cancelled while queued"
        with pytest.raises(ValueError, match="must be an absolute path"):
            await tether.cluster.submit("x", cwd="relative/dir")
        with pytest.raises(ValueError, match="a run needs a task"):
            await tether.cluster.submit("  ", cwd=tmp_path)
