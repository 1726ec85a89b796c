"""Secrets stay with tether: never in its environment block, never shown with a base URL."""

import asyncio
import json
import sys
from pathlib import Path

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import call as tool_call
from tests.adapters.support import delta, text_answer
from tests.cli.test_commands import env_for, python, tether

KEY = "sk-fence-0123456789abcdef"

PROBE = """
import json, os, sys
from tether.fence import environ, fence
fence()
block = open("/proc/self/environ", "rb").read()
print(json.dumps({
    "handed_over": environ().get("OPENAI_API_KEY"),
    "in_os_environ": "OPENAI_API_KEY" in os.environ,
    "in_block": sys.argv[1].encode() in block,
    "in_cmdline": sys.argv[1].encode() in open("/proc/self/cmdline", "rb").read()[1:],
    "handover_left": "TETHER_FENCED_FD" in os.environ,
}))
"""


def test_a_key_in_the_environment_is_handed_over_but_not_in_the_environment_block(
    tmp_path: Path,
) -> None:
    # The probe passes a harmless marker on its command line; the key is only in the environment.
    result = python(tmp_path, "-c", PROBE, "marker-not-a-key", env={"OPENAI_API_KEY": KEY})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["handed_over"] == KEY
    assert not seen["in_os_environ"] and not seen["handover_left"]
    result = python(tmp_path, "-c", PROBE, KEY, env={"OPENAI_API_KEY": KEY})
    assert json.loads(result.stdout)["in_block"] is False


def test_credentials_in_a_base_url_are_masked_in_config_show_and_errors(tmp_path: Path) -> None:
    url = "http://alice:hunter2-pass@127.0.0.1:9/v1"
    shown = tether(
        tmp_path,
        "config",
        "show",
        "--model",
        "openai-compatible:m",
        "--base-url",
        url,
        env={"OPENAI_API_KEY": KEY},
    )
    assert shown.returncode == 0, shown.stderr
    assert "hunter2" not in shown.stdout + shown.stderr
    assert "http://***@127.0.0.1:9/v1" in shown.stdout
    # The run fails to connect: the error, the logs and the stored events name the URL masked.
    once = tmp_path / "no-retry.yml"
    once.write_text("plugins:\n  - id: retry\n    disabled: true\n")
    failed = tether(
        tmp_path,
        "--config",
        str(once),
        "run",
        "--model",
        "openai-compatible:m",
        "--base-url",
        url,
        "hi",
    )
    assert failed.returncode != 0
    assert "hunter2" not in failed.stdout + failed.stderr
    assert "***@127.0.0.1:9" in failed.stderr
    logs = list((tmp_path / "sessions").glob("*.jsonl"))
    assert logs and all("hunter2" not in log.read_text() for log in logs)


HALF, OTHER_HALF = "sk-bulk-", "5e1f0c4b9a"
BULK_KEY = HALF + OTHER_HALF
"""The key; the tool's command names it only in halves, so the command itself never holds it."""

TOOL_PROBE = (
    f"a={HALF}; b={OTHER_HALF}; "
    "e=$(tr '\\0' '\\n' < /proc/$PPID/environ | grep -c \"$a$b\"); "
    "s=$(tr '\\0' '\\n' < /proc/$PPID/environ | grep -c '^BULK_SECRET_'); "
    "o=$(env | grep -c -e \"$a$b\" -e '^BULK_SECRET_'); "
    "t=$(tr '\\0' ' ' < /proc/$PPID/cmdline | grep -c tether.cli.main); "
    'echo "found environ=$e bulk=$s own=$o parent=$t"'
)


async def test_secrets_beyond_a_pipes_capacity_are_still_fenced_and_the_key_still_used(
    tmp_path: Path,
) -> None:
    # 96 secret-named variables of 1 KiB: far more than the 64 KiB a pipe holds.
    bulk = {f"BULK_SECRET_{i}": "x" * 1024 for i in range(96)}
    call = {"command": TOOL_PROBE}
    async with FakeServer() as server:
        server.queue(
            stream(
                [
                    delta(calls=[tool_call(0, json.dumps(call), id="c1", name="bash")]),
                    delta(finish="tool_calls"),
                    "[DONE]",
                ]
            ),
            stream(text_answer("probed")),
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "tether.cli.main", "run", "--model", "openai-compatible:m"),
            *("--base-url", f"{server.url}/v1", "probe"),
            env={**env_for(tmp_path), **bulk, "TETHER_API_KEY": BULK_KEY},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode().strip() == "probed"
    first, second = server.requests
    assert first.headers["authorization"] == second.headers["authorization"] == f"Bearer {BULK_KEY}"
    [result] = [m for m in second.json["messages"] if m["role"] == "tool"]
    assert "found environ=0 bulk=0 own=0 parent=1" in str(result["content"])


def test_a_fence_that_cannot_hand_the_secrets_over_refuses_to_start(tmp_path: Path) -> None:
    cannot_exec = (
        "import sys\n"
        "from tether.fence import fence\n"
        "sys.executable = sys.argv[1]\n"
        "fence()\n"
        "print('ran with the secrets in its environment')\n"
    )
    missing = str(tmp_path / "no-such-python")
    result = python(tmp_path, "-c", cannot_exec, missing, env={"OPENAI_API_KEY": KEY})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "tether: cannot keep the secrets out of reach of tools: "
        "re-executing failed (No such file or directory)\n"
    )
