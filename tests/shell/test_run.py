"""Foreground run(): faithful output, exit codes as results, timeouts, aborts, spills, env."""

import asyncio
import os
from pathlib import Path

import pytest

from tests.shell.conftest import GRACE_MS
from tests.shell.support import Gate, alive, entries, gone, live_members, mode_of, spec, text_of
from tether.runtime import CancelSignal
from tether.shell import LocalShell, ShellError


async def test_run_returns_stdout_stderr_and_exit_code(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "echo out; echo err >&2; printf 'no newline'"))
    assert result.stdout == "out\nno newline"
    assert result.stderr == "err\n"
    assert (result.exit_code, result.signal) == (0, None)
    assert not (result.timed_out or result.aborted or result.truncated)
    assert (result.stdout_spill, result.stderr_spill) == (None, None)


async def test_a_nonzero_exit_is_a_result_not_an_error(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "echo failing >&2; exit 42"))
    assert (result.exit_code, result.signal, result.stderr) == (42, None, "failing\n")


async def test_a_command_ended_by_a_signal_reports_the_signal_name(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "echo before; kill -KILL $$"))
    assert (result.exit_code, result.signal, result.stdout) == (None, "SIGKILL", "before\n")
    assert not (result.timed_out or result.aborted)


async def test_commands_run_in_the_resolved_cwd(shell: LocalShell, tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    result = await shell.run(spec(shell, "pwd", cwd="here"))
    assert result.stdout == f"{tmp_path / 'here'}\n"


async def test_stdin_is_dev_null(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "cat; readlink /proc/self/fd/0"))
    assert result.stdout == "/dev/null\n"


async def test_a_command_leads_its_own_process_group_and_session(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "echo $$; ps -o pgid=,sid= -p $$"))
    pid, ids = result.stdout.splitlines()
    assert ids.split() == [pid, pid]
    assert os.getpgid(0) != int(pid)


async def test_output_is_decoded_as_utf8_with_bad_bytes_replaced(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, r"printf 'h\xc3\xa9llo \xff\n'"))
    assert result.stdout == "héllo \ufffd\n"


async def test_the_timeout_stops_the_command(shell: LocalShell) -> None:
    result = await shell.run(spec(shell, "echo started; sleep 30", timeout_ms=100))
    assert result.timed_out and not result.aborted
    assert (result.exit_code, result.signal) == (None, "SIGTERM")
    assert result.stdout == "started\n"


async def test_the_timeout_kills_a_command_that_traps_term(shell: LocalShell) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = await shell.run(spec(shell, "trap '' TERM; sleep 30; echo survived", timeout_ms=100))
    assert result.timed_out and not result.aborted
    assert result.signal == "SIGKILL"
    assert "survived" not in result.stdout
    assert loop.time() - began >= (100 + GRACE_MS) / 1000


async def test_the_signal_aborts_the_command(shell: LocalShell, tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    signal = CancelSignal()
    run = asyncio.create_task(shell.run(spec(shell, f"echo $$ > {gate}; sleep 30"), signal))
    pgid = int(await gate.line())
    signal.cancel("user")
    result = await run
    assert result.aborted and not result.timed_out
    assert result.signal == "SIGTERM"
    assert await gone(pgid)


async def test_a_signal_cancelled_before_the_run_spawns_nothing(
    shell: LocalShell, tmp_path: Path
) -> None:
    signal = CancelSignal()
    signal.cancel("user")
    result = await shell.run(spec(shell, f"touch {tmp_path / 'ran'}"), signal)
    assert result.aborted and result.exit_code is None
    assert not (tmp_path / "ran").exists()


async def test_cancelling_the_caller_stops_the_command_before_propagating(
    shell: LocalShell, tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "gate")
    run = asyncio.create_task(shell.run(spec(shell, f"echo $$ > {gate}; sleep 30")))
    pgid = int(await gate.line())
    assert live_members(pgid)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not alive(pgid)
    assert await gone(pgid)


async def test_what_a_command_leaves_in_its_group_does_not_outlive_it(
    shell: LocalShell,
) -> None:
    result = await shell.run(spec(shell, "sleep 30 > /dev/null 2>&1 & echo $$ $!"))
    pgid, leftover = map(int, result.stdout.split())
    assert result.exit_code == 0
    assert not alive(leftover)
    assert await gone(pgid)


async def test_large_output_keeps_the_tail_and_spills_the_whole_stream(
    shell: LocalShell, spill_parent: Path
) -> None:
    result = await shell.run(spec(shell, "seq 1 100000", max_output_bytes=1000))
    full = "".join(f"{n}\n" for n in range(1, 100_001))
    assert result.stdout_truncated and not result.stderr_truncated
    assert len(result.stdout.encode()) == 1000
    assert full.endswith(result.stdout)
    assert result.stdout_spill is not None and result.stderr_spill is None
    spill = Path(result.stdout_spill)
    assert text_of(spill) == full
    assert spill.parent.parent == spill_parent
    assert mode_of(spill) == 0o600
    assert mode_of(spill.parent) == 0o700


async def test_output_within_the_cap_never_touches_the_disk(
    shell: LocalShell, spill_parent: Path
) -> None:
    result = await shell.run(spec(shell, "seq 1 100", max_output_bytes=1000))
    assert not result.truncated and result.stdout_spill is None
    assert entries(spill_parent) == []


async def test_a_cut_tail_starts_at_a_character_boundary(shell: LocalShell) -> None:
    result = await shell.run(
        spec(shell, "for i in $(seq 100); do printf 'é'; done", max_output_bytes=11)
    )
    assert result.stdout_truncated
    assert result.stdout == "é" * 5


async def test_inherited_secrets_are_scrubbed_from_the_environment(
    shell: LocalShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = ["MY_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "npm_token"]
    for name in secrets:
        monkeypatch.setenv(name, "hush")
    monkeypatch.setenv("KEEP_ME", "kept")
    result = await shell.run(spec(shell, "env"))
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert not set(secrets) & set(env)
    assert env["KEEP_ME"] == "kept"
    assert (env["TERM"], env["NO_COLOR"], env["PAGER"]) == ("dumb", "1", "cat")


async def test_variables_the_request_sets_are_passed_as_given(
    shell: LocalShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INHERITED_TOKEN", "hush")
    command = 'echo "$TERM $DEPLOY_TOKEN ${INHERITED_TOKEN:-unset}"'
    result = await shell.run(spec(shell, command, env={"TERM": "xterm", "DEPLOY_TOKEN": "given"}))
    assert result.stdout == "xterm given unset\n"


async def test_fast_commands_do_not_wait_for_the_kill_grace(shell: LocalShell) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    for _ in range(5):
        await shell.run(spec(shell, "true"))
    assert loop.time() - began < 5 * GRACE_MS / 1000


async def test_a_working_directory_removed_after_resolve_is_an_infrastructure_error(
    shell: LocalShell, tmp_path: Path
) -> None:
    (tmp_path / "doomed").mkdir()
    resolved = spec(shell, "true", cwd="doomed")
    (tmp_path / "doomed").rmdir()
    with pytest.raises(ShellError, match="could not start bash"):
        await shell.run(resolved)


async def test_the_exit_is_seen_where_the_platform_has_no_pidfd(
    shell: LocalShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    result = await shell.run(spec(shell, "echo fallback; exit 4"))
    assert (result.stdout, result.exit_code) == ("fallback\n", 4)
    stopped = await shell.run(spec(shell, "sleep 30", timeout_ms=50))
    assert stopped.timed_out and stopped.signal == "SIGTERM"


async def test_on_output_hears_the_output_while_the_command_runs(shell: LocalShell) -> None:
    heard: list[bytes] = []
    both = asyncio.Event()

    def listener(data: bytes) -> None:
        heard.append(data)
        if b"".join(heard).count(b"\n") >= 2:
            both.set()

    running = asyncio.ensure_future(
        shell.run(spec(shell, "echo early; echo err >&2; sleep 30"), on_output=listener)
    )
    try:
        await asyncio.wait_for(both.wait(), 10)
        assert not running.done()  # heard before the command ended
        assert sorted(b"".join(heard).split()) == [b"early", b"err"]
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def test_an_output_listener_that_raises_is_dropped_and_the_run_completes(
    shell: LocalShell, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[bytes] = []

    def listener(data: bytes) -> None:
        calls.append(data)
        raise RuntimeError("broken listener")

    result = await shell.run(spec(shell, "echo one; sleep 0.1; echo two"), on_output=listener)
    assert (result.exit_code, result.stdout) == (0, "one\ntwo\n")
    assert len(calls) == 1
    assert "an output listener" in caplog.text
