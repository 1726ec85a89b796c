"""The sandbox's cost per spawn, on real processes; prints its figures.

Usage: python bench/bench_sandbox.py [--rounds N] [--workspace DIR]

A foreground ``true`` through the shell executor, unconfined and confined
(``workspace-write``, network off; then network on; then the network
``allow-list``, whose child hands a listener to tether's proxy), interleaved
so all see the same machine. The default workspace is a fresh git repository holding the
usual protected paths (``.git/hooks``, ``.git/config``, ``.claude``,
``tether.yml``), so the read-only mounts and the check after the command are
part of what is measured. Printed: the median and the range of each, the
median added by the sandbox, and the part of it spent building the Landlock
ruleset in tether's process. Target: at most 10 ms added, median.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tether.runtime import Runtime
from tether.shell import LocalShell, ShellExecRequest
from tether.shell import local as shell_plugin
from tether.shell.confinement import landlock_abi, prepare
from tether.shell.definition import SHELL
from tether.shell.sandbox import Network, Sandbox, SandboxSettings

TARGET_MS = 10.0


def _repository(root: Path) -> str:
    """A git repository at ``root`` with the usual protected paths present."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".git" / "hooks").mkdir(exist_ok=True)
    (root / ".claude").mkdir()
    (root / "tether.yml").write_text("plugins: []\n")
    return str(root)


def _ms(seconds: list[float]) -> str:
    values = sorted(s * 1000 for s in seconds)
    return f"median {statistics.median(values):6.2f} ms  (range {values[0]:.2f}-{values[-1]:.2f})"


async def measure(shell: LocalShell, workspace: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as temp:
        sandboxes = {
            "network off": Sandbox(SandboxSettings(), temp),
            "network on": Sandbox(SandboxSettings(network=True), temp),
            "allow-list": Sandbox(
                SandboxSettings(network=Network.ALLOW_LIST, allowed_hosts=("pypi.org",)), temp
            ),
        }
        plain = shell.resolve(ShellExecRequest("true", cwd=workspace))
        specs = {
            name: shell.resolve(
                ShellExecRequest(
                    "true", cwd=workspace, sandbox=sandbox.policy_for(workspace, "bench")
                )
            )
            for name, sandbox in sandboxes.items()
        }
        for _ in range(10):  # warm up: ctypes, the page cache
            await shell.run(plain)
            for spec in specs.values():
                await shell.run(spec)
        times: dict[str, list[float]] = {"unconfined": [], **{name: [] for name in specs}}
        for _ in range(rounds):
            for name, spec in (("unconfined", plain), *specs.items()):
                start = time.perf_counter()
                result = await shell.run(spec)
                times[name].append(time.perf_counter() - start)
                assert result.exit_code == 0, result.stderr
        builds = []
        policy = sandboxes["network off"].policy_for(workspace, "bench")
        for _ in range(rounds):
            start = time.perf_counter()
            confinement = prepare(policy)
            builds.append(time.perf_counter() - start)
            assert confinement is not None
            confinement.close()
        for sandbox in sandboxes.values():
            await sandbox.aclose()
    base = statistics.median(times["unconfined"])
    for name, values in times.items():
        added = (statistics.median(values) - base) * 1000
        extra = "" if name == "unconfined" else f"  added {added:+.2f} ms"
        print(f"{name:12} {_ms(values)}{extra}")
    print(f"{'ruleset':12} {_ms(builds)}  (built in tether, part of the above)")
    worst = max(statistics.median(v) for v in times.values()) - base
    verdict = "within" if worst * 1000 <= TARGET_MS else "OVER"
    print(f"target: <= {TARGET_MS:.0f} ms added (median): {verdict}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workspace", default=None, help="default: a fresh git repository")
    args = parser.parse_args()
    if landlock_abi() == 0:
        raise SystemExit("no Landlock on this kernel: nothing to measure")
    with tempfile.TemporaryDirectory() as scratch:
        workspace = args.workspace or _repository(Path(scratch))
        print(f"Landlock ABI {landlock_abi()}; workspace {workspace}; {args.rounds} rounds")
        async with Runtime() as runtime:
            await runtime.ctx.plugin(shell_plugin, {})
            shell = runtime.ctx.get(SHELL)
            assert isinstance(shell, LocalShell)
            await measure(shell, workspace, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
