"""Entry point of the ``tether`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from tether import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether",
        description="tether: an agent harness with owned lifecycles and durable sessions.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("demo", help="tour the plugin runtime on its embedded defaults")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command == "demo":
        from tether.cli.demo import run_demo

        asyncio.run(run_demo())
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
