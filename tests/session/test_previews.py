"""``tool/previewed`` keeps the diff a client was shown: whole, or shortened when huge."""

from __future__ import annotations

import msgspec
from hypothesis import assume, given
from hypothesis import strategies as st

from tether.session import DEFAULT_REGISTRY, ToolPreviewed
from tether.session.previews import PreviewDiff, PreviewLocation, stored_diff
from tether.session.stored import StoredEvent


def test_a_diff_within_the_cap_is_stored_whole() -> None:
    assert stored_diff("/a.txt", "a\n", "b\n") == PreviewDiff("/a.txt", "a\n", "b\n")
    assert stored_diff("/new.txt", None, "x\n") == PreviewDiff("/new.txt", None, "x\n")


def test_a_huge_diff_is_stored_as_the_changed_lines_with_context_and_says_so() -> None:
    old = "".join(f"line {n}\n" for n in range(1, 50_001))
    new = old.replace("line 25000\n", "line 25000, changed\nand one more\n")
    diff = stored_diff("/big.txt", old, new, cap=100_000)
    assert diff.first_line == 24_997
    assert diff.old_text == "".join(f"line {n}\n" for n in range(24_997, 25_004))
    assert diff.new_text == (
        "".join(f"line {n}\n" for n in range(24_997, 25_000))
        + "line 25000, changed\nand one more\n"
        + "".join(f"line {n}\n" for n in range(25_001, 25_004))
    )
    assert diff.shortened == (
        f"the diff of /big.txt ({len(old) + len(new):,} characters) was kept in the log "
        "shortened: only lines 24997 to 25004 and the changes in them are shown again"
    )


def test_a_change_bigger_than_the_cap_is_stored_without_its_texts() -> None:
    diff = stored_diff("/gen.txt", None, "x\n" * 1000, cap=100)
    assert (diff.old_text, diff.new_text) == (None, "")
    assert diff.shortened is not None and "too big to keep in the log" in diff.shortened


def test_a_preview_round_trips_through_its_stored_form() -> None:
    previewed = ToolPreviewed(
        id="c1",
        kind="edit",
        title="edit a.txt",
        locations=(PreviewLocation("/w/a.txt", 3),),
        diffs=(PreviewDiff("/w/a.txt", "a\n", "b\n"), PreviewDiff("/w/n.txt", None, "n\n")),
    )
    assert previewed.to_data() == {
        "id": "c1",
        "kind": "edit",
        "title": "edit a.txt",
        "locations": [{"path": "/w/a.txt", "line": 3}],
        "diffs": [
            {"path": "/w/a.txt", "old_text": "a\n", "new_text": "b\n"},
            {"path": "/w/n.txt", "old_text": None, "new_text": "n\n"},
        ],
    }
    stored = StoredEvent("tool/previewed", 0, 1.0, msgspec.Raw(previewed.to_json()))
    (event,) = DEFAULT_REGISTRY.decode_stored([stored])
    assert event.payload == previewed


lines = st.lists(st.sampled_from(["a\n", "b\n", "ab\n", "\n", "c"]), max_size=30)


@given(lines, lines, lines)
def test_a_shortened_diff_holds_every_change(
    head: list[str], old: list[str], new: list[str]
) -> None:
    before = "".join(head + old + head)
    after = "".join(head + new + head)
    total = len(before) + len(after)
    diff = stored_diff("/f", before, after, cap=max(0, total - 1))
    assume(diff.shortened is not None and "too big" not in diff.shortened)
    assert diff.old_text is not None
    start = sum(len(line) for line in before.splitlines(keepends=True)[: diff.first_line - 1])
    assert before[start : start + len(diff.old_text)] == diff.old_text
    rest = before[start + len(diff.old_text) :]
    assert before[:start] + diff.new_text + rest == after
