"""Fixtures shared by the plugin tests."""

from __future__ import annotations

import pytest

from tether.plugins.fs import beneath


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A file tools test with ``openat2``, and with the ``O_NOFOLLOW`` walk (forced)."""
    if request.param == "openat2":
        if not beneath.has_openat2():
            pytest.skip("this kernel has no openat2")
    else:
        monkeypatch.setattr(beneath, "has_openat2", lambda: False)
    return str(request.param)
