"""The library entry point and composition overlays."""

from pathlib import Path

import pytest

from tether.agent import UserMessage
from tether.host import Tether, compose_document
from tether.runtime import CompositionError
from tether.runtime.compose import overlay_rows, parse_composition


def test_overlay_patches_rows_by_id_and_adds_new_ones() -> None:
    base = {
        "plugins": [
            {"id": "a", "plugin": "x.a", "config": {"k": 1}},
            {"id": "b", "plugin": "x.b"},
        ]
    }
    overlay = {
        "plugins": [
            {"id": "a", "config": {"k": 2}},
            {"id": "b", "disabled": True},
            {"id": "c", "plugin": "x.c"},
        ]
    }
    rows = parse_composition(overlay_rows(base, overlay, source="o.yml")).rows
    assert [(r.id, r.plugin, r.config, r.disabled) for r in rows] == [
        ("a", "x.a", {"k": 2}, False),
        ("b", "x.b", {}, True),
        ("c", "x.c", {}, False),
    ]


def test_overlay_rows_need_ids() -> None:
    with pytest.raises(CompositionError, match=r"o\.yml: row #1 has no id"):
        overlay_rows({"plugins": []}, {"plugins": [{"plugin": "x"}]}, source="o.yml")


def test_direct_settings_merge_into_row_configs(tmp_path: Path) -> None:
    overlay = {"plugins": [{"id": "persistence", "config": {"batch_window_ms": 5}}]}
    document = compose_document([overlay], data_dir=tmp_path, model="offline")
    rows = {r.id: r for r in parse_composition(document).rows}
    assert rows["persistence"].config == {"batch_window_ms": 5, "data_dir": str(tmp_path)}
    assert rows["agent_loop"].config["model"] == "offline"


def test_a_data_directory_given_as_a_string_is_the_same_as_a_path(tmp_path: Path) -> None:
    as_text = compose_document(data_dir=str(tmp_path))
    assert as_text == compose_document(data_dir=tmp_path)
    rows = {r.id: r for r in parse_composition(as_text).rows}
    assert rows["agent_loop"].config["user_instructions"] == str(tmp_path / "AGENTS.md")


async def test_the_default_composition_boots_and_runs_a_turn(tmp_path: Path) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        assert tether.problems == ()
        handle = await tether.agents.create(cwd=str(tmp_path))
        handle.agent.followup(UserMessage.text("hi"))
        await handle.agent.when_idle()
        assert handle.agent.session.events[-1].type == "turn/end"
    assert (tmp_path / "sessions" / f"{handle.agent.id}.jsonl").exists()


async def test_a_bad_row_is_reported_and_the_rest_runs(tmp_path: Path) -> None:
    overlay = {"plugins": [{"id": "broken", "plugin": "tether.nowhere"}]}
    async with Tether(data_dir=tmp_path, overlays=[overlay]) as tether:
        assert [p.row for p in tether.problems] == ["'broken'"]
        assert tether.agents.list() == []


async def test_stopping_tether_mid_tool_leaves_the_closing_turn_end_on_disk(
    tmp_path: Path,
) -> None:
    import asyncio
    import json

    from tether.session.store import SESSION_EVENT

    async with Tether(data_dir=tmp_path) as tether:
        agent = (await tether.agents.create(cwd=str(tmp_path))).agent
        started = asyncio.Event()
        tether.runtime.ctx.on(
            SESSION_EVENT,
            lambda session, event: started.set() if event.type == "tool/call" else None,
        )
        agent.followup(UserMessage.text("$ sleep 30"))
        await started.wait()
        in_memory = agent.session
    # Stopped without disposing the handle: the composition's own teardown.
    lines = (tmp_path / "sessions" / f"{in_memory.id}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines[1:]]
    assert len(records) == len(in_memory.events)
    assert records[-1]["type"] == "turn/end"
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "cause": "disposed"}
