"""Packages from the npm registry that tests run as real peers (an editor's ACP
client, a reference MCP server), installed once per set of pinned versions.

:func:`installed` installs the packages into ``build/npm/<digest>`` of the
repository with ``npm install --no-save`` under a file lock, so the two test
workers never install the same set at once and later runs reuse it. When Node.js
or npm is missing, or the registry cannot be reached, a test that needs them is
skipped with one line saying why, except under ``CI=true``, where that fails the
run: CI must test against the real peers.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "npm"
INSTALL_TIMEOUT = 300.0
"""Seconds one ``npm install`` may take (a cold cache fetches a few MB)."""


class NpmUnavailableError(Exception):
    """Node.js, npm or the registry cannot be used; the message says which and why."""


def _unavailable(reason: str) -> None:
    """Skip the calling test (fail it under ``CI=true``) for ``reason``."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _install(specs: tuple[str, ...], into: Path) -> None:
    """Install ``specs`` into ``into`` (which holds a ``package.json`` afterwards).

    Raises:
        NpmUnavailableError: npm is missing or failed (the registry unreachable, say).
    """
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise NpmUnavailableError("Node.js and npm are not installed (apt-get install nodejs npm)")
    into.mkdir(parents=True, exist_ok=True)
    (into / "package.json").write_text('{"private": true}\n')
    command = [npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        done = subprocess.run(
            [*command, *specs],
            cwd=into,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NpmUnavailableError(
            f"npm install {' '.join(specs)} took over {INSTALL_TIMEOUT:.0f} s"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise NpmUnavailableError(f"npm install {' '.join(specs)} failed: {last}")


def installed(*specs: str) -> Path:
    """The directory whose ``node_modules`` holds ``specs`` (``name@version``, pinned),
    installing them the first time; skips the calling test (fails it under ``CI=true``)
    when they cannot be installed."""
    digest = hashlib.sha256("\n".join(sorted(specs)).encode()).hexdigest()[:16]
    into = CACHE / digest
    done = into / ".installed"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            try:
                _install(specs, into)
            except NpmUnavailableError as exc:
                _unavailable(str(exc))
            done.write_text("\n".join(specs) + "\n")
    return into
