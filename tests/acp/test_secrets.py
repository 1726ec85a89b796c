"""A tool cannot read tether's keys: not from /proc/$PPID/environ, its cmdline, or its own env."""

from pathlib import Path

from tests.acp.harness import serving
from tests.acp.test_orphans import REAL_BASH

HALF, OTHER_HALF = "sk-fenced-", "7f3a9c2e51"
KEY = HALF + OTHER_HALF
"""The key; the tool's command names it only in halves, so the command itself never holds it."""

PROBE = (
    f"a={HALF}; b={OTHER_HALF}; "
    "e=$(tr '\\0' '\\n' < /proc/$PPID/environ | grep -c \"$a$b\"); "
    "c=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | grep -c \"$a$b\"); "
    "o=$(env | grep -c -e \"$a$b\" -e '^TETHER_'); "
    "t=$(tr '\\0' ' ' < /proc/$PPID/cmdline | grep -c tether.cli.main); "
    'echo "found environ=$e cmdline=$c own=$o parent=$t"'
)


async def test_a_tool_finds_no_key_in_tethers_proc_entries_or_its_own_env(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay=REAL_BASH, env={"OPENAI_API_KEY": KEY}) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, f"bash {PROBE}") == "end_turn"
        assert "done: found environ=0 cmdline=0 own=0 parent=1" in server.client.text(sid)
        await server.close_stdin()
        log = (server.home / "sessions" / f"{sid}.jsonl").read_text()
        assert KEY not in log and KEY not in server.stderr()
