"""Two ``tether`` processes with one configured agent of a fixed session id: exactly
one has it; the other is refused in one line (exit 2)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests import postgres
from tests.cli.test_commands import SLOW, slow_run, tether

AGENTS = (
    "  - id: agent_loop\n"
    "    plugin: tether.loop.plugin\n"
    "    config:\n"
    "      model: offline\n"
    "      agents:\n"
    "        - {name: fixed, session_id: fixed}\n"
)

SQLITE = "  - id: persistence\n    plugin: tether.persist.sqlite\n"


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "postgres"])
def test_two_processes_with_one_configured_session_id_exactly_one_has_it(
    tmp_path: Path, backend: str
) -> None:
    rows = SLOW + AGENTS
    if backend == "sqlite":
        rows += SQLITE
    elif backend == "postgres":
        # PostgreSQL connects slowly: the agent loop must wait for it, or the
        # configured agent is created before any claim can be made.
        rows += postgres.persistence_row(tmp_path)
    overlay = tmp_path / "fixed.yml"
    overlay.write_text(rows)
    # The first process is running a turn, with the configured agent live.
    first, _sid = slow_run(tmp_path, str(overlay))
    try:
        second = tether(tmp_path, "--config", str(overlay), "run", "hello")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=30)
    assert second.returncode == 2, second.stderr
    lines = [ln for ln in second.stderr.splitlines() if not ln.startswith("tether: no model")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "tether: error: row 'agent_loop': failed to start: session fixed is open "
    ), lines
    assert second.stdout == ""
