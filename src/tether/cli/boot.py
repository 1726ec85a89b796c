"""Turning command-line options into a composed tether."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tether.persist.location import data_dir as default_data_dir

if TYPE_CHECKING:
    from tether.host import Overlay, Tether


class UsageError(Exception):
    """A bad command-line argument; reported on stderr with exit code 2."""


def data_dir_of(args: argparse.Namespace) -> Path:
    explicit: Path | None = args.data_dir
    return default_data_dir(explicit)


def overlays_of(args: argparse.Namespace) -> list[Overlay]:
    """The user overlay (``$TETHER_HOME/tether.yml``, if present), then each ``--config``."""
    overlays: list[Overlay] = []
    user = data_dir_of(args) / "tether.yml"
    if user.is_file():
        overlays.append(user)
    for path in args.config or []:
        if not path.is_file():
            raise UsageError(f"--config {path}: no such file")
        overlays.append(path)
    return overlays


def build(args: argparse.Namespace, *, model: str | None = None) -> Tether:
    from tether.host import Tether

    return Tether(overlays=overlays_of(args), data_dir=data_dir_of(args), model=model)


async def start(args: argparse.Namespace, *, model: str | None = None) -> Tether:
    """Compose and start tether; rows that failed are reported on stderr."""
    tether = build(args, model=model)
    await tether.start()
    for problem in tether.problems:
        print(f"tether: {problem}", file=sys.stderr)
    return tether


def existing_dir(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a directory")
    return path.resolve()


def cwd_default() -> str:
    return os.getcwd()
