"""A stdio MCP server is a tool process: no tether death leaves it (or its children) behind."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.acp.harness import serving
from tests.acp.test_orphans import WITHIN, _recorded, _until, _watchdog_of, state_file
from tests.mcp_client.support import SDK_SERVER, command, results
from tests.mcp_client.test_acp_servers import call, new_session
from tests.shell.support import alive, ended


def forking(name: str, pidfile: Path) -> object:
    """The SDK server, leading a group in which a ``sleep`` it did not exec also runs."""
    script = f"sleep 303 & echo $! > {pidfile}; exec {sys.executable} {SDK_SERVER}"
    return command(name, "/bin/sh", "-c", script)


async def test_sigkill_of_tether_leaves_no_mcp_server_behind(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    # The server writes its pid outside the session's workspace: no sandbox here.
    async with serving(
        tmp_path, "--mode", "auto", "--sandbox", "full-access", model="offline"
    ) as server:
        sid = await new_session(server, forking("t", pidfile))
        assert await server.prompt(sid, call("mcp__t__pid")) == "end_turn"
        pids = [int(results(server.log(sid))[0][1]), int(pidfile.read_text())]
        assert all(alive(pid) for pid in pids)
        assert await _until(state_file(server), lambda groups: len(groups) == 1)
        ((record,),) = [_recorded(state_file(server))]
        assert record["label"].startswith(f"mcp:t:{sid}")  # type: ignore[index]
        server.process.kill()
        await server.process.wait()
        for pid in pids:
            assert await ended(pid, within=WITHIN)


async def test_a_restart_sweeps_the_mcp_servers_a_crashed_tether_left(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    # The server writes its pid outside the session's workspace: no sandbox here.
    async with serving(
        tmp_path, "--mode", "auto", "--sandbox", "full-access", model="offline"
    ) as server:
        sid = await new_session(server, forking("t", pidfile))
        sleeper = int(pidfile.read_text())
        assert await _until(state_file(server), lambda groups: len(groups) == 1)
        os.kill(_watchdog_of(server.process.pid), signal.SIGKILL)
        server.process.kill()
        await server.process.wait()
        assert alive(sleeper)
        del sid
    async with serving(tmp_path, model="offline") as restarted:
        await restarted.new_session()  # tether has booted: the sweep is done
        assert await ended(sleeper, within=WITHIN)
