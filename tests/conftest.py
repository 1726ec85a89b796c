"""Every test runs with a private ``TETHER_HOME``: nothing a test starts writes to the user's."""

import os
import shutil
import tempfile

import pytest

_created: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if "TETHER_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="tether-tests-")
        _created.append(home)
        os.environ["TETHER_HOME"] = home


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests import postgres

    postgres.drop_created()
    for home in _created:
        shutil.rmtree(home, ignore_errors=True)
