"""Small file systems for tests of full and read-only disks: a tmpfs mounted for one test.

Mounting needs root (or CAP_SYS_ADMIN); where it is refused, the test is
skipped and the reason printed.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(path: Path, *, size: str = "512k") -> Iterator[Path]:
    """Mount a fresh tmpfs of ``size`` on ``path`` (created) for the duration."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}"
        print(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, *, read_only: bool) -> None:
    """Make the tmpfs on ``path`` read-only, or writable again."""
    option = "remount,ro" if read_only else "remount,rw"
    subprocess.run(["mount", "-o", option, str(path)], check=True, capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until its file system is full; returns the file."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        while True:  # the last partial block
            try:
                os.write(fd, b"\0")
            except OSError:
                break
    finally:
        os.close(fd)
    return filler
