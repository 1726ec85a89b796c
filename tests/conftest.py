"""Every test runs with a private ``TETHER_HOME``: nothing a test starts writes to the user's.

The suite runs in worker processes (pytest-xdist), which set ``COLUMNS`` and ``LINES``
to 80x24; a command a test starts would take its width from them instead of from its
pseudo-terminal or its pipe, so they are removed: a worker runs tests as a plain run does.
"""

import os
import shutil
import tempfile

import pytest

_created: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    for sized in ("COLUMNS", "LINES"):
        os.environ.pop(sized, None)
    if "TETHER_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="tether-tests-")
        _created.append(home)
        os.environ["TETHER_HOME"] = home


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests import postgres

    postgres.drop_created()
    for home in _created:
        shutil.rmtree(home, ignore_errors=True)
