"""The escape suite: real commands under the sandbox try every way out, and none succeeds.

Each test runs bash through the shell executor with a
:class:`~tether.shell.sandbox.SandboxPolicy` for a workspace holding a git
repository and another harness's settings, next to a directory outside it
and a fake ``HOME`` with a private key; it asserts what is on disk (and on
the wire) afterwards, never only an exit status. A protected path that does
not exist yet cannot be kept from being made, only reported: those tests
assert the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.shell.support import Gate, Latch, require_landlock
from tether.plugins.tool_bash import render_result
from tether.shell import LocalShell, ShellError, ShellExecRequest, ShellResult, confinement
from tether.shell.sandbox import (
    Fallback,
    Sandbox,
    SandboxMode,
    SandboxPolicy,
    SandboxSettings,
)

SECRET = "PRIVATE-KEY-MATERIAL"


@pytest.fixture(autouse=True)
def _landlock() -> None:
    require_landlock()


class Place:
    """The workspace, the outside, and the fake home of one test."""

    def __init__(self, root: Path) -> None:
        self.ws = root / "ws"
        self.outside = root / "outside"
        self.home = root / "home"
        for path in (self.ws / "src", self.outside, self.home / ".ssh", self.ws / ".claude"):
            path.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(self.ws)], check=True)
        (self.ws / ".git" / "hooks").mkdir(exist_ok=True)
        self.hooks = sorted(p.name for p in (self.ws / ".git" / "hooks").iterdir())
        self.git_config = (self.ws / ".git" / "config").read_text()
        (self.ws / ".claude" / "settings.json").write_text("{}\n")
        (self.home / ".ssh" / "id_ed25519").write_text(SECRET + "\n")
        (self.outside / "target").write_text("original\n")


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    place = Place(tmp_path)
    monkeypatch.setenv("HOME", str(place.home))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(place.home / "agent.sock"))
    return place


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    temp = tmp_path / "temp"
    temp.mkdir()
    sandbox = Sandbox(SandboxSettings(), str(temp))
    yield sandbox
    sandbox.close()


async def run(shell: LocalShell, place: Place, policy: SandboxPolicy, command: str) -> ShellResult:
    request = ShellExecRequest(command, cwd=str(place.ws), sandbox=policy, timeout_ms=20_000)
    return await shell.run(shell.resolve(request))


@contextlib.asynccontextmanager
async def listening() -> AsyncIterator[tuple[int, list[object]]]:
    """A TCP server on the host's 127.0.0.1: its port, and the connections it accepted."""
    connections: list[object] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(reader)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], connections


@pytest.fixture
def policy(sandbox: Sandbox, place: Place) -> SandboxPolicy:
    return sandbox.policy_for(str(place.ws), "agent-1")


async def test_the_workspace_is_writable_and_its_record_names_the_policy(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    result = await run(shell, place, policy, 'echo ok > src/made && echo t > "$TMPDIR/t"')

    assert result.exit_code == 0, result.stderr
    assert (place.ws / "src" / "made").read_text() == "ok\n"
    assert result.sandbox == policy.summary()
    assert "workspace-write" in result.sandbox and "network off" in result.sandbox


async def test_no_write_outside_the_workspace_by_path_symlink_or_proc_root(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    out = place.outside
    os.symlink(out, place.ws / "src" / "old-link")
    command = (
        f"echo x > {out}/direct; "
        f"ln -s {out} src/new-link; echo x > src/new-link/via-new-link; "
        "echo x > src/old-link/via-old-link; "
        f"echo x > /proc/self/root{out}/via-proc-root; "
        f"echo x >> {out}/target; "
        f"rm -f {out}/target; mv {out}/target src/stolen"
    )
    result = await run(shell, place, policy, command)

    assert sorted(p.name for p in out.iterdir()) == ["target"]
    assert (out / "target").read_text() == "original\n"
    assert "Permission denied" in result.stderr


async def test_no_write_through_a_hard_link(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    command = (
        f"ln {place.outside}/target src/linked && echo x >> src/linked; "
        "ln .git/config src/config && echo x >> src/config"
    )
    result = await run(shell, place, policy, command)

    assert (place.outside / "target").read_text() == "original\n"
    assert (place.ws / ".git" / "config").read_text() == place.git_config
    assert not (place.ws / "src" / "linked").exists()
    assert not (place.ws / "src" / "config").exists()
    assert "Invalid cross-device link" in result.stderr


async def test_no_git_hook_can_be_planted(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    git = place.ws / ".git"
    command = (
        "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit; "
        "git config core.hooksPath /tmp; "
        "echo '[core] hooksPath = /tmp' >> .git/config; "
        "mv .git/hooks .git/old-hooks; mv .git .git-moved; rm -rf .git/hooks; "
        "rm -f .git/config; mv .git/config .git/config.old; "
        "mkdir -p src/.git/hooks && echo planted > src/.git/hooks/post-checkout"
    )
    result = await run(shell, place, policy, command)

    assert not (git / "hooks" / "pre-commit").exists()
    assert (git / "config").read_text() == place.git_config
    assert git.is_dir() and not (place.ws / ".git-moved").exists()
    assert not (git / "old-hooks").exists() and not (git / "config.old").exists()
    assert sorted(p.name for p in (git / "hooks").iterdir()) == place.hooks
    # A nested repository is only a directory of the workspace; git never runs its
    # hooks for the outer one. What matters is that the outer one is untouched.
    assert "hooksPath" not in (git / "config").read_text()
    assert result.appeared == ()


async def test_no_hook_can_be_planted_from_inside_git_or_through_dot_dot(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    hook = place.ws / ".git" / "hooks" / "pre-commit"
    for cwd, command in (
        (place.ws / ".git", "echo x > hooks/pre-commit; echo x >> config"),
        (place.ws / "src", "echo x > ../.git/hooks/pre-commit; echo x >> ../.git/config"),
    ):
        request = ShellExecRequest(command, cwd=str(cwd), sandbox=policy, timeout_ms=20_000)
        result = await shell.run(shell.resolve(request))

        assert not hook.exists(), cwd
        assert (place.ws / ".git" / "config").read_text() == place.git_config
        assert "Read-only file system" in result.stderr


UNMOUNT = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for path in (b".git/hooks", b".git/config", b".git"):
    print("umount", libc.umount2(path, 2), os.strerror(ctypes.get_errno()))
    print("remount", libc.mount(None, path, None, 4096 | 32, None))
"""


async def test_the_read_only_mounts_cannot_be_undone_nor_bypassed(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    # tether's own root, where the mounts are not, is out of reach too (/proc/PID/root).
    hook = f"{place.ws.resolve()}/.git/hooks/pre-commit"
    command = (
        f"{sys.executable} -c '{UNMOUNT}'; echo x > .git/hooks/pre-commit; mv .git moved; "
        f'echo x > "/proc/$PPID/root{hook}"; echo x > "/proc/{os.getpid()}/root{hook}"'
    )
    result = await run(shell, place, policy, command)

    assert not (place.ws / ".git" / "hooks" / "pre-commit").exists()
    assert not (place.ws / "moved").exists()
    assert result.stdout.count("umount -1 Operation not permitted") == 3
    assert result.stdout.count("remount -1") == 3


IN_A_VOLUME = """
import os, subprocess, sys
from tether.shell.confinement import confined_spawn
from tether.shell.sandbox import Sandbox, SandboxSettings
ws, temp = sys.argv[1:3]
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", f"{ws}/vol"], check=True)
policy = Sandbox(SandboxSettings(), temp).policy_for(ws, None)
command = "echo in > vol/file && cat vol/file; echo x > .git/hooks/pre-commit"
with confined_spawn(policy, os.getpid()) as launch:
    child = subprocess.Popen(["bash", "-c", command], cwd=ws, preexec_fn=launch.preexec)
sys.exit(child.wait())
"""


def test_a_volume_mounted_in_the_workspace_stays_in_view_and_writable(
    place: Place, tmp_path: Path
) -> None:
    (place.ws / "vol").mkdir()
    try:
        # A mount in the workspace, as a container's volume: made in a namespace of its own.
        ran = subprocess.run(
            ["unshare", "-Urm", sys.executable, "-c", IN_A_VOLUME, str(place.ws), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")

    assert ran.stdout == "in\n", ran.stderr
    assert "Read-only file system" in ran.stderr
    assert not (place.ws / ".git" / "hooks" / "pre-commit").exists()


async def test_a_submodule_hook_made_where_none_existed_is_reported(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    made = "mkdir -p .git/modules/sub/hooks && echo x > .git/modules/sub/hooks/post-checkout"
    result = await run(shell, place, policy, made)

    modules = str(place.ws.resolve() / ".git" / "modules")
    assert result.appeared == (modules,)
    shown = render_result(result, 20_000)
    assert f"protected paths appeared while the command ran: {modules}" in shown


async def test_no_harness_settings_can_be_edited_and_new_ones_are_reported(
    shell: LocalShell, place: Place, policy: SandboxPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    command = (
        "echo '{\"hooks\": 1}' > .claude/settings.json; "
        "echo x > .claude/settings.local.json; rm -rf .claude; mv .claude moved; "
        "mkdir .codex; echo x > tether.yml; mkdir -p .gemini"
    )
    result = await run(shell, place, policy, command)

    assert (place.ws / ".claude" / "settings.json").read_text() == "{}\n"
    assert not (place.ws / ".claude" / "settings.local.json").exists()
    assert not (place.ws / "moved").exists()
    ws = place.ws.resolve()
    assert set(result.appeared) == {str(ws / name) for name in (".codex", "tether.yml", ".gemini")}
    for name in (".codex", "tether.yml", ".gemini"):
        assert (ws / name).exists()  # reported, never removed: they may be the user's
    said = [r.getMessage() for r in caplog.records if "protected paths appeared" in r.getMessage()]
    assert len(said) == 1 and str(ws / "tether.yml") in said[0]


async def test_git_add_and_commit_work_with_the_hooks_and_config_read_only(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    command = (
        "echo code > src/main.py && git add src/main.py && "
        "git -c user.name=t -c user.email=t@example.com commit -q -m first && "
        "git branch topic && git rm -q --cached src/main.py"
    )
    result = await run(shell, place, policy, command)

    assert result.exit_code == 0, result.stderr
    git = await asyncio.create_subprocess_exec(
        "git", "-C", str(place.ws), "log", "--format=%s", "topic", stdout=subprocess.PIPE
    )
    log, _ = await git.communicate()
    assert log == b"first\n"
    assert result.appeared == ()


async def test_new_entries_can_be_made_in_the_top_level_and_in_git(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    (place.ws / "old-name").write_text("x\n")
    command = (
        "mkdir build && touch NEWFILE && mv old-name new-name && rm NEWFILE && "
        f"{sys.executable} -m venv --without-pip .venv && mkdir .git/rr-cache && "
        "touch .git/MERGE_MSG"
    )
    result = await run(shell, place, policy, command)

    assert result.exit_code == 0, result.stderr
    assert (place.ws / "build").is_dir() and not (place.ws / "NEWFILE").exists()
    assert (place.ws / "new-name").read_text() == "x\n"
    assert (place.ws / ".venv" / "pyvenv.cfg").is_file()
    assert (place.ws / ".git" / "rr-cache").is_dir()


async def test_no_key_can_be_read(shell: LocalShell, place: Place, policy: SandboxPolicy) -> None:
    command = (
        'cat "$HOME"/.ssh/id_*; cat /proc/self/root"$HOME"/.ssh/id_ed25519; '
        'cp "$HOME"/.ssh/id_ed25519 src/copy; echo "agent=${SSH_AUTH_SOCK:-none}"'
    )
    result = await run(shell, place, policy, command)

    assert SECRET not in result.stdout + result.stderr
    assert not (place.ws / "src" / "copy").exists()
    assert "agent=none" in result.stdout


async def test_no_network_to_the_host_loopback_or_a_resolver(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    command = (
        "(exec 3<>/dev/tcp/127.0.0.1/PORT) && echo REACHED-LOOPBACK; "
        "(exec 3<>/dev/tcp/1.1.1.1/53) && echo REACHED-RESOLVER; "
        "(exec 3<>/dev/udp/1.1.1.1/53) && echo REACHED-UDP; "
        "getent hosts example.com && echo RESOLVED"
    )
    async with listening() as (port, connections):
        result = await run(shell, place, policy, command.replace("PORT", str(port)))

    assert connections == []
    assert "REACHED" not in result.stdout and "RESOLVED" not in result.stdout


async def test_the_network_setting_turns_it_on(
    shell: LocalShell, place: Place, tmp_path: Path
) -> None:
    sandbox = Sandbox(SandboxSettings(network=True), str(tmp_path))
    policy = sandbox.policy_for(str(place.ws), None)
    async with listening() as (port, _):
        result = await run(shell, place, policy, f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo UP")
    sandbox.close()
    assert "UP" in result.stdout


async def test_a_daemon_that_outlives_its_command_stays_confined(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    latch = Latch(place.ws / "src" / "latch")
    gate = Gate(place.ws / "src" / "gate")
    ready = place.ws / "src" / "ready"
    os.mkfifo(ready)
    daemon = (
        f"echo up > {ready}; read x < {latch}; echo x > {place.outside}/daemon; echo $? > {gate}"
    )
    # The command ends once its daemon has left its process group (setsid), so
    # the stop of the group cannot reach it.
    command = f"setsid bash -c '{daemon}' > /dev/null 2>&1 < /dev/null & read x < {ready}"

    result = await run(shell, place, policy, command)
    assert result.exit_code == 0, result.stderr
    # The command has ended; its daemon runs on, and now tries its escape.
    await asyncio.wait_for(latch.release(), 20)
    status = await asyncio.wait_for(gate.line(), 20)

    assert status != "0"
    assert not (place.outside / "daemon").exists()


async def test_a_signal_to_a_process_outside_is_refused(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    result = await run(shell, place, policy, f"kill -0 {os.getpid()} && echo SIGNALLED")

    assert "SIGNALLED" not in result.stdout
    assert "Operation not permitted" in result.stderr


async def test_read_only_mode_writes_only_the_temp_dir(
    shell: LocalShell, place: Place, tmp_path: Path
) -> None:
    sandbox = Sandbox(SandboxSettings(mode=SandboxMode.READ_ONLY), str(tmp_path))
    policy = sandbox.policy_for(str(place.ws), None)
    result = await run(
        shell,
        place,
        policy,
        'echo x > src/file; echo t > "$TMPDIR/t" && cat src/../.claude/settings.json',
    )
    sandbox.close()

    assert not (place.ws / "src" / "file").exists()
    assert result.stdout == "{}\n"


async def test_a_denied_access_is_explained_in_the_tool_result(
    shell: LocalShell, place: Place, policy: SandboxPolicy
) -> None:
    result = await run(shell, place, policy, "echo x > .git/hooks/pre-commit")

    shown = render_result(result, 20_000)
    assert "[sandbox workspace-write" in shown
    assert "denied an access (Read-only file system)" in shown


async def test_full_access_confines_nothing(
    shell: LocalShell, place: Place, tmp_path: Path
) -> None:
    sandbox = Sandbox(SandboxSettings(mode=SandboxMode.FULL_ACCESS), str(tmp_path))
    policy = sandbox.policy_for(str(place.ws), None)
    result = await run(shell, place, policy, f"echo x > {place.outside}/free")

    assert (place.outside / "free").read_text() == "x\n"
    assert result.sandbox == "sandbox full-access"


def test_the_in_process_policy_matches_the_kernel_rules(place: Place, sandbox: Sandbox) -> None:
    policy = sandbox.policy_for(str(place.ws), None)
    ws = str(place.ws.resolve())

    assert policy.may_write(f"{ws}/src/new.py")
    assert policy.may_write(f"{ws}/new-top-level.txt")
    for protected in (".git/hooks/pre-commit", ".git/config", ".claude/x", ".codex", "tether.yml"):
        assert not policy.may_write(f"{ws}/{protected}")
        assert "protected" in (policy.refusal(f"{ws}/{protected}", write=True) or "")
    assert not policy.may_write(str(place.outside / "x"))
    assert not policy.may_read(str(place.home / ".ssh" / "id_ed25519"))
    assert policy.may_read(f"{ws}/.git/config")


async def test_without_landlock_the_fallback_refuses_or_runs_unconfined_said_once(
    shell: LocalShell,
    place: Place,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(confinement, "_kernel", lambda: None)
    monkeypatch.setattr(confinement, "_reported", [])
    refusing = Sandbox(SandboxSettings(fallback=Fallback.REFUSE), str(tmp_path))
    warning = Sandbox(SandboxSettings(fallback=Fallback.WARN), str(tmp_path))

    with pytest.raises(ShellError, match="fallback is refuse"):
        await run(shell, place, refusing.policy_for(str(place.ws), None), "true")
    first = await run(shell, place, warning.policy_for(str(place.ws), None), "true")
    await run(shell, place, warning.policy_for(str(place.ws), None), "true")
    refusing.close()
    warning.close()

    assert first.exit_code == 0
    assert first.sandbox == "unconfined: no Landlock here"
    said = [r for r in caplog.records if "sandbox unavailable" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0].getMessage()


async def test_without_namespaces_landlock_still_cuts_tcp(
    shell: LocalShell, place: Place, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confinement, "namespaces_work", lambda: False)
    async with listening() as (port, connections):
        result = await run(
            shell, place, policy, f"(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo REACHED"
        )

    assert connections == []
    assert "REACHED" not in result.stdout
    assert "Permission denied" in result.stderr


async def test_without_namespaces_protected_paths_are_kept_by_granting_their_siblings(
    shell: LocalShell, place: Place, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confinement, "namespaces_work", lambda: False)
    command = (
        "echo x > .git/hooks/pre-commit; echo x >> .git/config; mv .git moved; "
        "echo x > tether.yml; mkdir build; echo ok > src/fine"
    )
    result = await run(shell, place, policy, command)

    assert not (place.ws / ".git" / "hooks" / "pre-commit").exists()
    assert (place.ws / ".git" / "config").read_text() == place.git_config
    for absent in ("moved", "tether.yml", "build"):  # the price: no new top-level entry
        assert not (place.ws / absent).exists()
    assert (place.ws / "src" / "fine").read_text() == "ok\n"
    assert result.appeared == ()


def test_each_owner_has_a_private_temp_dir_removed_at_close(tmp_path: Path) -> None:
    sandbox = Sandbox(SandboxSettings(), str(tmp_path))
    first = Path(sandbox.policy_for(str(tmp_path), "a").temp_dir or "")
    second = Path(sandbox.policy_for(str(tmp_path), "b").temp_dir or "")

    assert first != second
    assert first.stat().st_mode & 0o777 == 0o700
    assert first.parent.stat().st_mode & 0o777 == 0o700
    sandbox.close()
    assert not first.parent.exists()
