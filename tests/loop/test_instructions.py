"""Instruction files: which are found, in which order, and how they are cut."""

from __future__ import annotations

from pathlib import Path

from tether.loop.instructions import discover, read_instructions
from tether.loop.prompt import render_instructions


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_files_are_found_from_the_repository_root_down_to_the_cwd_user_file_first(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    cwd = root / "pkg" / "sub"
    cwd.mkdir(parents=True)
    user = write(tmp_path / "home" / "AGENTS.md", "user rules")
    top = write(root / "AGENTS.md", "root rules")
    middle = write(root / "pkg" / "CLAUDE.md", "pkg rules")
    near = write(cwd / "GEMINI.md", "sub rules")
    write(tmp_path / "AGENTS.md", "above the repository: not read")

    assert discover(cwd, root, user) == [(user, True), (top, False), (middle, False), (near, False)]


def test_agents_md_wins_over_claude_md_and_gemini_md_in_one_directory(tmp_path: Path) -> None:
    agents = write(tmp_path / "AGENTS.md", "a")
    write(tmp_path / "CLAUDE.md", "c")
    write(tmp_path / "GEMINI.md", "g")
    assert discover(tmp_path, tmp_path, None) == [(agents, False)]
    agents.unlink()
    assert discover(tmp_path, tmp_path, None) == [(tmp_path / "CLAUDE.md", False)]


def test_outside_a_repository_only_the_cwd_is_read(tmp_path: Path) -> None:
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    write(tmp_path / "a" / "AGENTS.md", "parent")
    here = write(cwd / "AGENTS.md", "here")
    assert discover(cwd, None, tmp_path / "missing.md") == [(here, False)]


def test_a_long_file_is_cut_with_a_note_naming_its_size_and_the_setting(tmp_path: Path) -> None:
    path = write(tmp_path / "AGENTS.md", "x" * 5_000)
    (entry,) = read_instructions([(path, False)], max_file_bytes=1_000, max_total_bytes=10_000)
    assert entry.truncated
    assert entry.text.startswith("x" * 1_000)
    assert "x" * 1_001 not in entry.text
    assert f"{path} is 5000 bytes and only the first 1000 are shown" in entry.text
    assert "agent_loop.instructions_max_bytes" in entry.text


def test_the_total_budget_serves_the_nearest_file_first(tmp_path: Path) -> None:
    far = write(tmp_path / "AGENTS.md", "f" * 800)
    near = write(tmp_path / "sub" / "AGENTS.md", "n" * 800)
    entries = read_instructions(
        [(far, False), (near, False)], max_file_bytes=1_000, max_total_bytes=1_000
    )
    assert [entry.path for entry in entries] == [far, near]
    assert not entries[1].truncated
    assert entries[0].truncated
    assert "agent_loop.instructions_max_total_bytes" in entries[0].text
    assert entries[0].text.startswith("f" * 200 + "\n\n[Instructions cut here")


def test_a_cut_never_leaves_half_a_character(tmp_path: Path) -> None:
    path = write(tmp_path / "AGENTS.md", "é" * 600)
    (entry,) = read_instructions([(path, False)], max_file_bytes=301, max_total_bytes=10_000)
    assert "\ufffd" not in entry.text
    assert entry.text.startswith("é" * 150)


def test_each_file_is_shown_under_its_path_the_users_marked(tmp_path: Path) -> None:
    user = write(tmp_path / "home" / "AGENTS.md", "be kind")
    project = write(tmp_path / "AGENTS.md", "use tabs")
    text = render_instructions(
        read_instructions(
            [(user, True), (project, False)], max_file_bytes=1_000, max_total_bytes=2_000
        )
    )
    assert f'<instructions path="{user}" (the user\'s own instructions)>\nbe kind' in text
    assert f'<instructions path="{project}">\nuse tabs\n</instructions>' in text
    assert text.index("be kind") < text.index("use tabs")
