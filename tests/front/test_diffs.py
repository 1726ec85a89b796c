"""The one diff every front end shows: unified hunks with context and the file's line
numbers, folded around the changes, and a patch read into the same rows."""

from __future__ import annotations

from pathlib import Path

from tests.plugins.test_rewind import git
from tether.cli.render import diff_lines
from tether.front.diffs import Row, hunks, line_in_file, patch_files, unified_lines

FILE = "".join(f"line {n}\n" for n in range(1, 301))


def test_one_changed_line_of_a_long_file_is_one_hunk_with_context_and_line_numbers() -> None:
    changed = FILE.replace("line 150\n", "line 150 changed\n")
    (hunk,) = hunks("big.txt", FILE, changed).hunks
    assert hunk.folded == 146  # lines 1-146 folded away
    assert hunk.rows == (
        Row(" ", 147, 147, "line 147"),
        Row(" ", 148, 148, "line 148"),
        Row(" ", 149, 149, "line 149"),
        Row("-", 150, None, "line 150"),
        Row("+", None, 150, "line 150 changed"),
        Row(" ", 151, 151, "line 151"),
        Row(" ", 152, 152, "line 152"),
        Row(" ", 153, 153, "line 153"),
    )


def test_changes_far_apart_are_two_hunks_with_the_unchanged_lines_between_folded() -> None:
    changed = FILE.replace("line 10\n", "ten\n").replace("line 200\n", "two hundred\n")
    first, second = hunks("big.txt", FILE, changed).hunks
    assert (first.folded, first.rows[0].old, first.rows[-1].old) == (6, 7, 13)
    assert (second.folded, second.rows[0].old) == (183, 197)  # 14..196 folded


def test_an_excerpt_is_numbered_where_it_is_in_its_file(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text(FILE)
    first = line_in_file(str(path), "line 42\nline 43\n", "x")
    assert first == 42
    (hunk,) = hunks("big.txt", "line 42\nline 43\n", "line 42\nforty-three\n", first_line=42).hunks
    assert [(r.kind, r.old, r.new) for r in hunk.rows] == [
        (" ", 42, 42),
        ("-", 43, None),
        ("+", None, 43),
    ]


def test_a_new_file_is_all_added_lines_from_line_one() -> None:
    (hunk,) = hunks("new.txt", None, "a\nb\n").hunks
    assert hunk.folded == 0
    assert hunk.rows == (Row("+", None, 1, "a"), Row("+", None, 2, "b"))


def test_the_terminal_prints_the_same_unified_diff() -> None:
    changed = FILE.replace("line 150\n", "line 150 changed\n")
    printed = diff_lines("big.txt", FILE, changed)
    assert printed == unified_lines("big.txt", FILE, changed)
    assert printed[2] == "@@ -147,7 +147,7 @@"
    assert len(printed) == 11  # two headers, a hunk header, 8 rows: not 600 lines


def test_a_git_patch_of_several_files_is_read_into_numbered_rows(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "big.txt").write_text(FILE)
    (tmp_path / "gone.txt").write_text("bye\n")
    (tmp_path / "img.bin").write_bytes(b"\0\1")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "base")
    (tmp_path / "big.txt").write_text(FILE.replace("line 150\n", "changed\n"))
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "new.txt").write_text("hello\n")
    (tmp_path / "img.bin").write_bytes(b"\0\2")
    git(tmp_path, "add", "-A")
    files = {f.path: f for f in patch_files(git(tmp_path, "diff", "--cached"))}
    assert sorted(files) == ["big.txt", "gone.txt", "img.bin", "new.txt"]
    (hunk,) = files["big.txt"].hunks
    assert hunk.folded == 146
    assert [r for r in hunk.rows if r.kind != " "] == [
        Row("-", 150, None, "line 150"),
        Row("+", None, 150, "changed"),
    ]
    assert files["new.txt"].hunks[0].rows == (Row("+", None, 1, "hello"),)
    assert files["gone.txt"].hunks[0].rows == (Row("-", 1, None, "bye"),)
    assert files["img.bin"].hunks == () and "Binary files" in files["img.bin"].note
