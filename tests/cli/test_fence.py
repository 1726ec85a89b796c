"""Secrets stay with tether: never in its environment block, never shown with a base URL."""

import json
from pathlib import Path

from tests.cli.test_commands import python, tether

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
