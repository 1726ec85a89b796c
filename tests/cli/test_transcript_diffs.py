"""The diffs an editor was shown before an edit ran are in the transcript too."""

from __future__ import annotations

from tests.session.builders import complete_turn, new_session
from tether.cli.render import MAX_DIFF_LINES, transcript
from tether.session import ToolPreviewed
from tether.session.previews import PreviewDiff


def test_a_stored_diff_is_shown_where_it_was_previewed_at_its_lines_in_the_file() -> None:
    session = new_session()
    complete_turn(session, "first")
    session.append(
        ToolPreviewed(
            "e1",
            "edit",
            "edit big.txt",
            diffs=(
                PreviewDiff("/ws/big.txt", "a\nb\nc\n", "a\nB\nc\n", 40, "shortened: 3 lines"),
                PreviewDiff("/ws/new.txt", None, "hello\n"),
            ),
        )
    )
    plain = list(transcript(session))
    at = plain.index("    --- /ws/big.txt")
    assert plain[at:] == [
        "    --- /ws/big.txt",
        "    +++ /ws/big.txt",
        "    @@ -40,3 +40,3 @@",
        "     a",
        "    -b",
        "    +B",
        "     c",
        "    (shortened: 3 lines)",
        "    --- /dev/null",
        "    +++ /ws/new.txt",
        "    @@ -0,0 +1 @@",
        "    +hello",
    ]
    markdown = "\n".join(transcript(session, markdown=True))
    assert "```diff\n--- /ws/big.txt\n+++ /ws/big.txt\n@@ -40,3 +40,3 @@\n" in markdown


def test_a_long_diff_is_cut_with_a_note() -> None:
    session = new_session()
    new_text = "".join(f"line {n}\n" for n in range(100))
    session.append(ToolPreviewed("w1", "edit", "write", diffs=(PreviewDiff("/a", None, new_text),)))
    plain = list(transcript(session))
    assert plain[-1] == f"    … {100 + 3 - MAX_DIFF_LINES} more lines"
    assert len([line for line in plain if line.startswith("    +line")]) == MAX_DIFF_LINES - 3


def test_a_diff_of_equal_texts_shows_nothing() -> None:
    session = new_session()
    complete_turn(session, "first")
    before = list(transcript(session, markdown=True))
    same = PreviewDiff("/ws/same.txt", "a\nb\n", "a\nb\n")
    session.append(ToolPreviewed("e1", "edit", "edit same.txt", diffs=(same,)))
    assert list(transcript(session, markdown=True)) == before
    assert "```diff" not in "\n".join(transcript(session, markdown=True))
    shortened = PreviewDiff("/ws/same.txt", "a\n", "a\n", shortened="shortened: 3 lines")
    session.append(ToolPreviewed("e2", "edit", "edit same.txt", diffs=(shortened,)))
    assert list(transcript(session))[-1] == "    (shortened: 3 lines)"
