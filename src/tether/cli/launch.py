"""The ``tether`` console script: fence the secrets first, then import and run the command.

:func:`~tether.fence.fence` re-executes the process when secrets are in its
environment; this module imports nothing else first, so the process that is
replaced has done as little work as possible (see ``bench/bench_cli.py``).
"""

from __future__ import annotations

from typing import NoReturn

from tether.fence import fence


def entry() -> NoReturn:
    """Fence the secrets, then :func:`tether.cli.main.entry`."""
    fence()
    from tether.cli.main import entry as run

    run()
