"""Debian's Chromium as the browser tests, the web benchmark and the screenshots launch it."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
"""Where ``apt-get install chromium`` puts it (Playwright's own browser download is not used)."""

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    # Nothing leaves the machine: no background fetches, updates or sync.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
