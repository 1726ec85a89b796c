"""The private snapshot store: git plumbing that never touches the user's repository."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.rewind.store import WorkspaceStore, store_dir


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "README").write_text("hello\n")
    return root


def store_for(root: Path, tmp_path: Path, cap: int = 1024) -> WorkspaceStore:
    return WorkspaceStore(root, tmp_path / "home", cap=cap)


def test_a_workspace_that_is_no_repository_is_snapshotted_and_restored(
    root: Path, tmp_path: Path
) -> None:
    store = store_for(root, tmp_path)
    first = store.snapshot()
    (root / "src" / "a.py").write_text("a = 2\n")
    (root / "README").unlink()
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / "new").write_text("new\n")
    assert store.snapshot().tree != first.tree
    restored = store.restore(first.tree)
    assert sorted(restored.written) == ["README", "src/a.py"]
    assert restored.deleted == ("deep/er/new",)
    assert (root / "src" / "a.py").read_text() == "a = 1\n"
    assert (root / "README").read_text() == "hello\n"
    assert not (root / "deep").exists()  # the directories the deletion emptied go too
    assert store.snapshot().tree == first.tree


def test_the_users_repository_state_is_never_read_or_written(root: Path, tmp_path: Path) -> None:
    git(root, "init", "-q")
    git(root, "add", "README")
    before = {
        name: (root / ".git" / name).read_bytes()
        for name in ("index", "HEAD")
        if (root / ".git" / name).exists()
    }
    status = git(root, "status", "--porcelain")
    store = store_for(root, tmp_path)
    first = store.snapshot()
    (root / "README").write_text("changed\n")
    store.snapshot()
    store.restore(first.tree)
    after = {name: (root / ".git" / name).read_bytes() for name in before}
    assert after == before
    assert git(root, "status", "--porcelain") == status
    assert store.dir == store_dir(tmp_path / "home", root.resolve())


def test_ignored_files_and_files_over_the_cap_are_left_out_and_left_alone(
    root: Path, tmp_path: Path
) -> None:
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "run.log").write_text("log\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("o\n")
    (root / "big.bin").write_bytes(b"x" * 2048)
    store = store_for(root, tmp_path)
    first = store.snapshot()
    assert first.unstored == ("big.bin",)
    listed = git(
        root, "--git-dir", str(store.dir / "git"), "ls-tree", "-r", "--name-only", first.tree
    )
    assert "run.log" not in listed and "build/out.o" not in listed and "big.bin" not in listed
    (root / "run.log").write_text("more log\n")
    (root / "big.bin").write_bytes(b"y" * 4096)
    store.restore(first.tree, frozenset(first.unstored))
    assert (root / "run.log").read_text() == "more log\n"
    assert (root / "big.bin").read_bytes() == b"y" * 4096


def test_a_lock_a_killed_process_left_does_not_block_the_next_snapshot(
    root: Path, tmp_path: Path
) -> None:
    store = store_for(root, tmp_path)
    store.snapshot()
    Path(str(store.dir / "index") + ".lock").write_text("")
    (root / "README").write_text("after a crash\n")
    assert store.changed(store.snapshot().tree, store.snapshot().tree) == []


KILLED = """
import sys
from pathlib import Path
from tether.rewind.store import WorkspaceStore
store = WorkspaceStore(Path(sys.argv[1]), Path(sys.argv[2]))
n = 0
while True:
    (Path(sys.argv[1]) / "counter").write_text(str(n))
    store.snapshot()
    n += 1
"""


def test_a_sigkill_in_the_middle_of_snapshots_leaves_a_store_that_works(
    root: Path, tmp_path: Path
) -> None:
    for index in range(300):
        (root / "src" / f"m{index}.py").write_text(f"m = {index}\n")
    home = tmp_path / "home"
    for delay in (0.05, 0.15, 0.3, 0.5):
        child = subprocess.Popen([sys.executable, "-c", KILLED, str(root), str(home)])
        time.sleep(delay)  # a kill at an arbitrary point of a snapshot; nothing awaits it
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    store = WorkspaceStore(root, home)
    first = store.snapshot()
    (root / "src" / "a.py").write_text("a = 3\n")
    store.snapshot()
    store.restore(first.tree)
    assert (root / "src" / "a.py").read_text() == "a = 1\n"


def test_a_workspace_that_is_the_data_directory_is_snapshotted_without_git(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    itself = WorkspaceStore(root, root, watch=True)
    first = itself.snapshot()
    assert first.unstored == ()
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(itself, "_git", lambda *args, **_: ran.append(args))
    monkeypatch.setattr(itself, "_git_at_once", lambda *args: ran.append(args))
    (root / "sessions").mkdir()
    (root / "sessions" / "log.jsonl").write_text("{}\n")
    (root / "note").write_text("x\n")
    assert itself.snapshot() == first  # nothing of it is kept, and nothing is listed
    assert ran == []


def test_tethers_own_data_inside_the_workspace_is_never_snapshotted(
    root: Path, tmp_path: Path
) -> None:
    home = root / "data [1]"
    store = WorkspaceStore(root, home)
    first = store.snapshot()
    (home / "sessions").mkdir(parents=True)
    (home / "sessions" / "log.jsonl").write_text("{}\n")
    assert store.snapshot().tree == first.tree  # the store and the logs are left out
    itself = WorkspaceStore(home, home)
    (home / "note").write_text("x\n")
    listed = git(
        root, "--git-dir", str(itself.dir / "git"), "ls-tree", "-r", itself.snapshot().tree
    )
    assert listed == ""
