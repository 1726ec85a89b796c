"""The file tools obey the sandbox policy in-process: the rules a confined command meets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.fs_support import file_tools


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE\n")
    monkeypatch.setenv("HOME", str(home))
    return home


async def test_protected_paths_are_read_only_to_the_file_tools(tmp_path: Path) -> None:
    async with file_tools(tmp_path, sandbox={}) as files:
        (files.root / ".git" / "hooks").mkdir(parents=True)
        (files.root / ".claude").mkdir()
        (files.root / ".claude" / "settings.json").write_text("{}\n")

        refused = await files.refused("write", path=".git/hooks/pre-commit", content="evil")
        assert "protected by the sandbox" in refused
        await files.ok("read", path=".claude/settings.json")
        await files.refused(
            "edit", path=".claude/settings.json", old_string="{}", new_string='{"hooks": 1}'
        )
        await files.refused("write", path=".codex/config.toml", content="x")
        await files.ok("write", path="notes.txt", content="fine\n")

    assert not (files.root / ".git" / "hooks" / "pre-commit").exists()
    assert (files.root / ".claude" / "settings.json").read_text() == "{}\n"
    assert not (files.root / ".codex").exists()
    assert (files.root / "notes.txt").read_text() == "fine\n"


async def test_a_write_outside_the_workspace_is_left_to_the_outside_rule(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    async with file_tools(tmp_path, sandbox={}, outside_workspace="allow") as files:
        await files.ok("write", path=str(outside), content="x")
        protected = await files.refused("write", path=str(files.root / "tether.yml"), content="x")

    assert outside.read_text() == "x"
    assert "protected by the sandbox" in protected


async def test_keys_are_unreadable_and_unsearchable(tmp_path: Path, home: Path) -> None:
    async with file_tools(tmp_path, sandbox={}, outside_workspace="allow") as files:
        read = await files.refused("read", path=str(home / ".ssh" / "id_ed25519"))
        search = await files.refused("grep", pattern="PRIVATE", path=str(home))

    assert "unreadable in the sandbox" in read
    assert "PRIVATE" not in read and "PRIVATE" not in search


async def test_read_only_mode_refuses_every_write(tmp_path: Path) -> None:
    async with file_tools(tmp_path, sandbox={"mode": "read-only"}) as files:
        await files.refused("write", path="new.txt", content="x")

    assert not (files.root / "new.txt").exists()
