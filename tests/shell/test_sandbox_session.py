"""A session's own sandbox mode (``session/config sandbox``) decides its next processes' policy."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.session.settings import SANDBOX_OPTION
from tether.shell.sandbox import Network, Sandbox, SandboxMode, SandboxSettings


def test_the_sessions_mode_wins_over_the_setting_and_a_bad_one_is_ignored(
    tmp_path: Path,
) -> None:
    sandbox = Sandbox(SandboxSettings(), str(tmp_path))
    ws = str(tmp_path)
    try:
        assert sandbox.policy_for(ws, "a").mode is SandboxMode.WORKSPACE_WRITE
        read_only = sandbox.policy_for(ws, "a", {SANDBOX_OPTION: "read-only"})
        assert read_only.mode is SandboxMode.READ_ONLY
        assert read_only.writable == (read_only.temp_dir,)
        full = sandbox.policy_for(ws, "a", {SANDBOX_OPTION: "full-access"})
        assert not full.confined and full.network and full.temp_dir is None
        assert sandbox.mode_for({SANDBOX_OPTION: "bogus"}) is SandboxMode.WORKSPACE_WRITE
        assert sandbox.mode_for({"mode": "auto"}) is SandboxMode.WORKSPACE_WRITE
    finally:
        sandbox.close()


async def test_a_policy_for_the_file_tools_starts_no_proxy_even_from_a_thread(
    tmp_path: Path,
) -> None:
    settings = SandboxSettings(network=Network.ALLOW_LIST, allowed_hosts=("pypi.org",))
    sandbox = Sandbox(settings, str(tmp_path))
    try:
        checked = await asyncio.to_thread(
            lambda: sandbox.policy_for(str(tmp_path), "a", None, spawn=False)
        )
        assert checked.proxy is None and not checked.network and not checked.allow_list
        assert sandbox.policy_for(str(tmp_path), "a").allow_list
    finally:
        await sandbox.aclose()


def test_the_network_is_summed_up_in_words(tmp_path: Path) -> None:
    listed = SandboxSettings(network=Network.ALLOW_LIST, allowed_hosts=("pypi.org", "*.npmjs.org"))
    assert Sandbox(listed).network_summary() == "network allow-list: pypi.org, *.npmjs.org"
    assert Sandbox(SandboxSettings(network=True)).network_summary() == "network on"
    assert Sandbox(SandboxSettings()).network_summary() == "network off"
