"""A watched store's snapshots are exactly a full scan's, whatever changed the files and how.

Each test changes a real workspace (real files, real processes, real git) and
compares the snapshot of a store that watches it (inotify) with the snapshot
of a store that scans every file: equal tree ids mean equal content.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.rewind.test_store import git
from tether.rewind import watch
from tether.rewind.store import Snapshot, WorkspaceStore
from tether.rewind.watch import Changes, Watcher

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


class Pair:
    """A watched store and a scanning store of one workspace."""

    def __init__(self, root: Path, tmp_path: Path, cap: int = 1024) -> None:
        self.root = root
        self.watched = WorkspaceStore(root, tmp_path / "watched", cap=cap, watch=True)
        self.scanned = WorkspaceStore(root, tmp_path / "scanned", cap=cap)

    def check(self) -> Snapshot:
        """Snapshot with both; the watched one, asserted equal to the scan."""
        watched = self.watched.snapshot()
        assert watched == self.scanned.snapshot()
        return watched


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "src" / "pkg" / "b.py").write_text("b = 1\n")
    (root / "README").write_text("hello\n")
    (root / ".gitignore").write_text("*.log\n")
    return root


@pytest.fixture
def pair(root: Path, tmp_path: Path) -> Pair:
    pair = Pair(root, tmp_path)
    pair.check()  # the first snapshot scans, and the watches are in place from then
    return pair


def inotify_fds() -> int:
    return sum(
        os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


def test_an_unchanged_workspace_runs_no_git(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    first = pair.watched.snapshot()
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(pair.watched, "_git", lambda *args, **_: ran.append(args))
    monkeypatch.setattr(pair.watched, "_git_at_once", lambda *args: ran.append(args))
    assert pair.watched.snapshot() == first
    assert ran == []


def test_changes_before_the_first_snapshot_are_in_it(root: Path, tmp_path: Path) -> None:
    store = WorkspaceStore(root, tmp_path / "home", watch=True)
    (root / "README").write_text("before any watch\n")
    (root / "new").write_text("new\n")
    assert store.snapshot() == WorkspaceStore(root, tmp_path / "other").snapshot()


def test_rapid_writes_by_processes_are_all_seen(pair: Pair) -> None:
    for round_ in range(20):
        (pair.root / "README").write_text(f"round {round_}\n")
        (pair.root / "src" / "a.py").write_text(f"a = {round_}\n")
        if round_ % 5 == 0:
            pair.check()
    subprocess.run(["sed", "-i", "s/a = /a := /", "src/a.py"], cwd=pair.root, check=True)
    script = "import pathlib; [pathlib.Path(f'gen{i}.py').write_text(str(i)) for i in range(30)]"
    subprocess.run([sys.executable, "-c", script], cwd=pair.root, check=True)
    snapshot = pair.check()
    assert snapshot.tree == pair.scanned.snapshot().tree


def test_a_file_created_then_deleted_between_snapshots_leaves_no_trace(pair: Pair) -> None:
    before = pair.check()
    (pair.root / "src" / "brief.py").write_text("here\n")
    (pair.root / "src" / "brief.py").unlink()
    (pair.root / "gone").mkdir()
    (pair.root / "gone" / "x").write_text("x\n")
    os.unlink(pair.root / "gone" / "x")
    os.rmdir(pair.root / "gone")
    assert pair.check() == before


def test_renames_and_directory_moves_in_out_and_within(pair: Pair, tmp_path: Path) -> None:
    os.rename(pair.root / "README", pair.root / "README.md")
    pair.check()
    os.rename(pair.root / "src" / "pkg", pair.root / "pkg2")
    pair.check()
    (pair.root / "pkg2" / "after.py").write_text("written in the moved directory\n")
    pair.check()
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "c.py").write_text("c\n")
    os.rename(outside, pair.root / "came")
    pair.check()
    (pair.root / "came" / "deep" / "c.py").write_text("changed after it came\n")
    pair.check()
    os.rename(pair.root / "src", tmp_path / "left")
    pair.check()
    (tmp_path / "left" / "a.py").write_text("changed after it left\n")
    pair.check()


def test_new_directories_and_their_files_are_seen(pair: Pair) -> None:
    deep = pair.root / "n" / "m" / "o"
    deep.mkdir(parents=True)
    (deep / "f").write_text("f\n")
    pair.check()
    (deep / "g").write_text("g\n")  # the new directories are watched now
    (pair.root / "n" / "m" / "h").write_text("h\n")
    pair.check()
    (pair.root / "src" / "a.py").unlink()
    (pair.root / "src" / "a.py").mkdir()  # a file becomes a directory
    (pair.root / "src" / "a.py" / "inner").write_text("inner\n")
    pair.check()
    subprocess.run(["rm", "-rf", "n"], cwd=pair.root, check=True)
    (pair.root / "n").write_text("a directory becomes a file\n")
    pair.check()


def test_modes_links_and_the_cap(pair: Pair) -> None:
    os.chmod(pair.root / "README", 0o755)
    pair.check()
    os.symlink("README", pair.root / "link")
    pair.check()
    os.unlink(pair.root / "link")
    os.symlink("src", pair.root / "link")
    pair.check()
    (pair.root / "big").write_bytes(b"x" * 2048)
    assert pair.check().unstored == ("big",)
    (pair.root / "big").write_bytes(b"x" * 10)
    assert pair.check().unstored == ()


def test_ignore_rules_changing_anywhere_are_followed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    (config / "git").mkdir(parents=True)
    (config / "git" / "ignore").write_text("*.tmp\n")
    (root / "kept.log").write_text("log\n")
    (root / "scratch.tmp").write_text("tmp\n")
    (root / "secret.key").write_text("key\n")
    pair = Pair(root, tmp_path)
    pair.check()
    (root / ".gitignore").write_text("")  # kept.log is no longer ignored
    pair.check()
    (config / "git" / "ignore").write_text("")  # nor scratch.tmp
    pair.check()
    git(root, "init", "-q")
    pair.check()
    (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("*.key\n")
    pair.check()


def test_a_nested_repository_appearing_is_left_out(pair: Pair) -> None:
    (pair.root / "src" / "sub").mkdir()
    (pair.root / "src" / "sub" / "c.py").write_text("c\n")
    git(pair.root / "src" / "sub", "init", "-q")
    assert pair.check().unstored == ("src/sub",)
    (pair.root / "src" / "sub" / "c.py").write_text("changed in the nested repository\n")
    os.chmod(pair.root / "src" / "sub", 0o700)
    assert pair.check().unstored == ("src/sub",)
    (pair.root / "src" / "a.py").write_text("a change elsewhere\n")
    assert pair.check().unstored == ("src/sub",)


def test_a_git_checkout_of_another_branch_is_seen(root: Path, tmp_path: Path) -> None:
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "other")
    (root / "src" / "pkg" / "b.py").unlink()
    (root / "other" / "dir").mkdir(parents=True)
    (root / "other" / "dir" / "file").write_text("other\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "other")
    git(root, "checkout", "-q", "main")
    pair = Pair(root, tmp_path)
    pair.check()
    git(root, "checkout", "-q", "other")
    pair.check()
    git(root, "checkout", "-q", "main")
    pair.check()


def test_a_background_process_writing_across_snapshots_is_seen(pair: Pair) -> None:
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib\n"
            "for line in sys.stdin:\n"
            "    pathlib.Path(line.strip()).write_text(line)\n"
            "    print('done', flush=True)\n",
        ],
        cwd=pair.root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        for index in range(5):
            writer.stdin.write(f"bg{index}.txt\n")
            writer.stdin.flush()
            assert writer.stdout.readline() == "done\n"
            pair.check()
    finally:
        writer.stdin.close()
        writer.wait()


def test_a_file_with_several_links_written_through_any_is_seen(root: Path, tmp_path: Path) -> None:
    os.link(root / "README", tmp_path / "alias")  # before the watches
    pair = Pair(root, tmp_path)
    pair.check()
    with open(tmp_path / "alias", "a") as alias:  # the same file, written from outside
        alias.write("written through the other link\n")
    pair.check()
    os.link(root / "src" / "a.py", root / "src" / "pkg" / "same.py")  # a link made inside
    pair.check()
    with open(root / "src" / "pkg" / "same.py", "a") as same:  # src/a.py changes too
        same.write("# through the new name\n")
    pair.check()
    with open(root / "src" / "a.py", "a") as same:
        same.write("# through the old name\n")
    pair.check()


def overflow(root: Path) -> None:
    """More events than the kernel queues (alternating, so it merges none)."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    fds = [os.open(root / name, os.O_WRONLY) for name in ("README", ".gitignore")]
    try:
        for _ in range(limit // 2 + 100):
            os.write(fds[0], b"a")
            os.write(fds[1], b"b")
    finally:
        for fd in fds:
            os.close(fd)


def test_an_overflowed_queue_is_a_full_scan(pair: Pair) -> None:
    overflow(pair.root)
    (pair.root / "late").write_text("after the overflow\n")
    pair.check()
    (pair.root / "later").write_text("seen by the fresh watches\n")
    pair.check()


def test_the_watcher_says_when_it_lost_events(root: Path) -> None:
    watcher = Watcher(root)
    assert watcher.start()
    try:
        (root / "README").write_text("x\n")
        assert watcher.take() == {"README"}
        os.rename(root / "src", root / "moved")
        assert watcher.take() is None  # a directory moved: its watches' paths went stale
        (root / "moved" / "a.py").write_text("y\n")
        assert watcher.take() == {"moved/a.py"}
        (root / ".gitignore").write_text("*\n")
        assert watcher.take() is None
        (root / "moved" / "pkg" / "b.py").write_text("z\n")
        assert watcher.take() == {"moved/pkg/b.py"}
        overflow(root)
        assert watcher.take() is None
        assert watcher.take() == set()
    finally:
        watcher.close()
    assert not watcher.running


def test_a_workspace_with_more_directories_than_its_share_of_watches_is_scanned(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "watch_limit", lambda: 2)  # the root and src, not src/pkg
    before = inotify_fds()
    assert not Watcher(root).start()
    assert inotify_fds() == before
    pair = Pair(root, tmp_path)
    pair.check()
    (root / "src" / "pkg" / "b.py").write_text("changed\n")
    pair.check()
    assert inotify_fds() == before


def test_an_index_another_process_wrote_makes_the_next_snapshot_scan(
    root: Path, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    index.write_bytes(b"one")
    changes = Changes(root, tmp_path / "home", lambda: None)
    try:
        assert changes.take(index, False) is None  # the first: the watches start
        changes.settled(index)
        assert changes.take(index, False) == set()
        index.write_bytes(b"another writer")
        assert changes.take(index, False) is None
        changes.settled(index)
        assert changes.take(index, True) is None  # the repository's own excludes changed
        changes.forget()
        assert changes.take(index, False) is None
    finally:
        changes.close()


def test_closing_the_store_closes_its_watches(root: Path, tmp_path: Path) -> None:
    before = inotify_fds()
    store = WorkspaceStore(root, tmp_path / "home", watch=True)
    first = store.snapshot()
    assert inotify_fds() == before + 1
    store.close()
    assert inotify_fds() == before
    (root / "README").write_text("after the close\n")
    assert store.snapshot() != first  # scans from now on
    assert inotify_fds() == before


Step = Callable[[Path, int], None]


def _write(root: Path, n: int) -> None:
    (root / f"f{n % 4}").write_text(f"{n}\n")


def _append(root: Path, n: int) -> None:
    with open(root / "src" / "a.py", "a") as file:
        file.write(f"# {n}\n")


def _delete(root: Path, n: int) -> None:
    for path in (root / f"f{n % 4}", root / "d" / f"g{n % 3}"):
        if path.is_file():
            path.unlink()


def _mkdir(root: Path, n: int) -> None:
    (root / "d").mkdir(exist_ok=True)
    (root / "d" / f"g{n % 3}").write_text(f"{n}\n")


def _move_dir(root: Path, n: int) -> None:
    if (root / "d").is_dir():
        os.rename(root / "d", root / f"d{n}")
        os.rename(root / f"d{n}", root / "d")


def _rename(root: Path, n: int) -> None:
    if (root / f"f{n % 4}").exists():
        os.replace(root / f"f{n % 4}", root / f"f{(n + 1) % 4}")


def _rmtree(root: Path, n: int) -> None:
    subprocess.run(["rm", "-rf", "d"], cwd=root, check=True)


STEPS: list[Step] = [_write, _append, _delete, _mkdir, _move_dir, _rename, _rmtree]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(STEPS), st.booleans()), max_size=12))
def test_any_sequence_of_changes_snapshots_as_a_scan(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Step, bool]]
) -> None:
    base = tmp_path_factory.mktemp("seq")
    root = base / "work"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a\n")
    pair = Pair(root, base)
    try:
        pair.check()
        for n, (step, snapshot) in enumerate(steps):
            step(root, n)
            if snapshot:
                pair.check()
        pair.check()
    finally:
        pair.watched.close()
