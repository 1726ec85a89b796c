"""The spend budget as a user meets it: ``tether run`` with ``--max-budget-usd`` and friends.

``tether`` runs as a subprocess against a fake OpenAI-compatible server on
127.0.0.1 that reports usage and counts the requests it received: once the
budget is exhausted, none is sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.adapters.fake_server import FakeServer, Recorded, Reply, stream
from tests.adapters.support import call, delta, text_answer, usage
from tests.cli.test_commands import session_id
from tests.cli.test_session_model import config_with_model, tether, user_config

PRICES = {"input": 10.0, "output": 10.0}
"""USD 10 per million tokens, in and out."""


def config(url: str, *, prices: bool = True) -> str:
    """The configuration of ``budget-model`` served at ``url``, priced unless ``prices``
    is false."""
    priced = f"""\
  - id: llm
    config:
      models:
        "openai-compatible:budget-model":
          prices: {json.dumps(PRICES)}
"""
    return config_with_model(url, "budget-model") + (priced if prices else "")


def calling_forever(
    server: FakeServer, prompt_tokens: int, completion_tokens: int, *, clients: int = 1
) -> None:
    """Answer every request with a call of a tool that does not exist: its error result
    sends the model back, so the turn would go on until its step limit. ``clients``:
    how many processes may ask at once (each request queues the script again)."""

    async def script(request: Recorded, reply: Reply) -> None:
        server.queue(script)
        number = len(server.requests)
        events = [
            delta(calls=[call(0, "{}", id=f"call-{number}", name="no_such_tool")]),
            delta(finish="tool_calls"),
            usage(prompt_tokens, completion_tokens),
            "[DONE]",
        ]
        await stream(events)(request, reply)

    server.queue(*[script] * clients)


def stored(home: Path, session: str) -> list[dict[str, Any]]:
    path = next(home.rglob(f"{session}.jsonl"))
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [record for record in records if "type" in record]


def of_type(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record["data"] for record in records if record["type"] == kind]


async def test_run_sends_no_request_after_the_usd_budget_is_exhausted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(home, config(server.url))
        calling_forever(server, prompt_tokens=3000, completion_tokens=20)
        code, out, err = await tether(
            home, "run", "--max-budget-usd", "0.25", "--output-format", "json", "loop"
        )
        sent = len(server.requests)
    assert code == 1, err
    result = json.loads(out.splitlines()[-1])
    assert result["stop_reason"] == "budget"
    assert result["budget"]["budget"] == "session"
    assert result["budget"]["unit"] == "usd"
    assert result["budget"]["limit"] == 0.25
    assert "budget exhausted" in err
    records = stored(home, result["session_id"])
    reserved = of_type(records, "budget/reserved")
    settled = of_type(records, "budget/settled")
    # Every request sent was reserved (on disk) first; the one that did not fit was not sent.
    assert 2 <= sent == len(reserved) == len(settled)
    assert all(request.json["max_tokens"] == 8192 for request in server.requests)
    spent = sum(entry["usd"] for entry in settled)
    assert spent <= 0.25 + max(entry["usd"] for entry in reserved)
    (receipt,) = of_type(records, "budget/exhausted")
    assert receipt["spent"] == round(spent, 6)
    assert receipt["spent"] + receipt["reserving"] > 0.25
    assert [r["data"]["reason"]["kind"] for r in records if r["type"] == "turn/end"] == ["budget"]


async def test_a_resumed_session_keeps_what_it_spent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(home, config(server.url))
        calling_forever(server, prompt_tokens=3000, completion_tokens=20)
        code, _, err = await tether(home, "run", "--max-budget-usd", "0.25", "loop")
        assert code == 1, err
        sent = len(server.requests)
        session = session_id(err)
        server.queue(stream(text_answer("never sent")))
        code, _, err = await tether(
            home, "run", "--resume", session, "--max-budget-usd", "0.25", "go on"
        )
        assert code == 1, err
        assert len(server.requests) == sent
    assert "budget exhausted" in err
    ends = [r["data"]["reason"]["kind"] for r in stored(home, session) if r["type"] == "turn/end"]
    assert ends == ["budget", "budget"]


async def test_a_token_budget_works_without_prices(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(home, config(server.url, prices=False))
        calling_forever(server, prompt_tokens=3000, completion_tokens=20)
        code, out, err = await tether(
            home, "run", "--max-budget-tokens", "40000", "--output-format", "json", "loop"
        )
        sent = len(server.requests)
    assert code == 1, err
    result = json.loads(out.splitlines()[-1])
    assert result["stop_reason"] == "budget"
    assert result["budget"]["unit"] == "tokens"
    records = stored(home, result["session_id"])
    assert 2 <= sent == len(of_type(records, "budget/reserved"))
    assert sum(entry["tokens"] for entry in of_type(records, "budget/settled")) <= 40000


async def test_a_usd_budget_without_prices_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(home, config(server.url, prices=False))
        code, out, err = await tether(home, "run", "--max-budget-usd", "1", "hello")
        assert server.requests == []
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "needs the prices of openai-compatible:budget-model" in lines[0]


async def test_the_budget_set_in_tether_yml_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(
            home,
            config(server.url).replace(
                "      model: openai-compatible:budget-model\n",
                "      model: openai-compatible:budget-model\n      budget: {turn_usd: 0.25}\n",
            ),
        )
        calling_forever(server, prompt_tokens=3000, completion_tokens=20)
        code, out, err = await tether(home, "run", "--output-format", "json", "loop")
    assert code == 1, err
    result = json.loads(out.splitlines()[-1])
    assert result["stop_reason"] == "budget"
    assert result["budget"]["budget"] == "turn"


async def test_a_bad_budget_flag_is_one_line(tmp_path: Path) -> None:
    code, _, err = await tether(tmp_path, "run", "--max-budget-usd", "-3", "hello")
    assert code == 2
    assert "--max-budget-usd: must be more than 0, got -3" in err
    assert "Traceback" not in err


async def test_four_processes_share_the_hosts_day_budget_and_none_sends_after_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    limit = 80_000
    async with FakeServer() as server:
        user_config(home, config(server.url, prices=False))
        calling_forever(server, prompt_tokens=3000, completion_tokens=20, clients=4)
        flags = ("run", "--max-day-tokens", str(limit), "--output-format", "json")
        runs = await asyncio.gather(*(tether(home, *flags, f"loop {n}") for n in range(4)))
        sent = len(server.requests)
        code, out, err = await tether(home, *flags, "one more")
        assert len(server.requests) == sent  # exhausted: the fifth process sends nothing
    for status, output, errors in runs:
        assert status == 1, errors
        assert json.loads(output.splitlines()[-1])["stop_reason"] == "budget"
    assert code == 1, err
    result = json.loads(out.splitlines()[-1])
    assert result["budget"]["budget"] == "day"
    (day,) = (home / "budget").iterdir()
    entries = [json.loads(line) for line in day.read_text().splitlines()]
    reserved = [entry for entry in entries if not entry.get("settled")]
    settled = {entry["id"]: entry["tokens"] for entry in entries if entry.get("settled")}
    # Every request sent was reserved in the host's ledger first, and settled after.
    assert sent == len(reserved) == len(settled) >= 4
    spent = sum(settled.values())
    assert spent <= limit + max(entry["tokens"] for entry in reserved)
    assert result["budget"]["spent"] == spent
    assert oct(day.stat().st_mode & 0o777) == "0o600"
