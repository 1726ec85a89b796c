"""The diffs `tether web` sends: one changed line of a long file is one hunk with
context and the file's line numbers — in a permission question, in the tool call's
record and in the workspace's diff of a turn (the terminal's diff, computed on the
server)."""

from __future__ import annotations

from pathlib import Path

from .server import Served, read_stream, served
from .test_rewind import _turn

FILE = "".join(f"line {n}\n" for n in range(1, 301))

HUNK = [
    [" ", 147, 147, "line 147"],
    [" ", 148, 148, "line 148"],
    [" ", 149, 149, "line 149"],
    ["-", 150, None, "line 150"],
    ["+", None, 150, "line 150 changed"],
    [" ", 151, 151, "line 151"],
    [" ", 152, 152, "line 152"],
    [" ", 153, 153, "line 153"],
]


async def _asked(web: Served, session_id: str, tool: str) -> dict[str, object]:
    """Allow every question until one about ``tool`` is asked; that one."""
    after = None
    while True:
        got = await read_stream(web.client, session_id, until=None, until_state=True, after=after)
        after = got.ids[-1] if got.ids else after
        (question,) = got.states[-1]["questions"]  # type: ignore[misc]
        if question["tool"] == tool:
            return question  # type: ignore[no-any-return]
        url = f"/api/sessions/{session_id}/questions/{question['id']}"
        await web.client.post(url, json={"allow": True})


async def test_an_edit_of_a_long_file_is_asked_and_shown_as_one_hunk_with_line_numbers(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.txt").write_text(FILE)
    async with served(tmp_path / "home", mode="ask") as web:
        created = await web.client.post("/api/sessions", json={"cwd": str(work), "mode": "ask"})
        session_id = created.json()["id"]
        prompt = {"text": "edit big.txt: line 150 => line 150 changed"}
        await web.client.post(f"/api/sessions/{session_id}/prompt", json=prompt)
        question = await _asked(web, session_id, "edit")
        (diff,) = question["diffs"]  # type: ignore[misc]
        assert diff["path"].endswith("big.txt")
        (hunk,) = diff["hunks"]
        assert hunk == {"folded": 146, "rows": HUNK}
        url = f"/api/sessions/{session_id}/questions/{question['id']}"
        await web.client.post(url, json={"allow": True})
        got = await read_stream(web.client, session_id)
    (call,) = [r for r in got.records if r["type"] == "tool/call" and r["data"]["name"] == "edit"]  # type: ignore[index]
    (diff,) = call["diffs"]  # type: ignore[misc]
    assert diff["path"] == "big.txt"
    (hunk,) = diff["hunks"]
    assert hunk == {"folded": 149, "rows": HUNK[3:5]}  # the call's own text, at its line
    assert (work / "big.txt").read_text() == FILE.replace("line 150\n", "line 150 changed\n")


async def test_the_diff_of_a_turn_is_sent_as_numbered_hunks_per_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "big.txt").write_text(FILE)
    async with served(tmp_path / "home") as web:
        created = await web.client.post("/api/sessions", json={"cwd": str(work)})
        session_id = created.json()["id"]
        await _turn(web, session_id, "$ sed -i 's/^line 150$/line 150 changed/' big.txt")
        diff = (await web.client.get(f"/api/sessions/{session_id}/diff?turn=1")).json()
    (file,) = diff["files"]
    assert file["path"] == "big.txt" and file["note"] == ""
    assert file["hunks"] == [{"folded": 146, "rows": HUNK}]
