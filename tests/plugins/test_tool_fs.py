"""The file tools (tool_fs): every tool, and every bad input answered with its reason."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.plugins.fs_support import PNG_1X1, Files, file_tools
from tether.plugins.fs.beneath import Beneath
from tether.runtime import CancelSignal


@pytest.fixture(autouse=True)
def each_resolution(resolution: str) -> str:
    """Every test with ``openat2`` and with the walk used where the kernel lacks it."""
    return resolution


@pytest.fixture
async def fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with file_tools(tmp_path) as files:
        yield files


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tether-tmp")]


# -- read ---------------------------------------------------------------------------


async def test_read_numbers_lines_and_pages_with_offset_and_limit(fs: Files) -> None:
    (fs.root / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    whole = await fs.ok("read", path="a.txt")
    assert whole.splitlines()[0] == "     1\tline 1"
    assert whole.splitlines()[-1] == "    10\tline 10"
    page = await fs.ok("read", path="a.txt", offset=4, limit=2)
    assert page == "     4\tline 4\n     5\tline 5\n[more lines follow; read on with offset=6]"
    assert await fs.ok("read", path="a.txt", offset=50) == "(a.txt has fewer than 50 lines)"
    (fs.root / "empty.txt").write_text("")
    assert await fs.ok("read", path="empty.txt") == "(empty.txt is empty)"


async def test_read_pages_through_a_file_bigger_than_a_whole_read(fs: Files) -> None:
    big = fs.root / "big.txt"
    big.write_text("x" * 100 + "\n" + "".join(f"row {n}\n" for n in range(200_000)))
    page = await fs.ok("read", path="big.txt", offset=100_002, limit=1)
    assert page.startswith("100002\trow 100000\n[more lines follow")
    long_line = fs.root / "long.txt"
    long_line.write_text("y" * 5000 + "\nend\n")
    shown = await fs.ok("read", path="long.txt")
    assert "[line cut at 2000 characters]" in shown and shown.endswith("     2\tend")


async def test_read_refuses_missing_directories_binaries_images_and_non_utf8(fs: Files) -> None:
    # Each refusal says which call to make next.
    assert await fs.refused("read", path="nope.txt") == (
        'nope.txt does not exist; to find where it is, call the glob tool with {"pattern": '
        '"**/nope.txt"}'
    )
    (fs.root / "sub").mkdir()
    assert await fs.refused("read", path="sub") == (
        "sub is a directory, not a file; to list its files, call the glob tool with "
        '{"pattern": "*", "path": "sub"}'
    )
    (fs.root / "bin").write_bytes(b"abc\0def")
    assert "is a binary file" in await fs.refused("read", path="bin")
    (fs.root / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    assert await fs.refused("read", path="pic.png") == (
        "pic.png is an image (image/png), not a text file; "
        "images are returned only to a model that accepts them"
    )
    (fs.root / "latin.txt").write_bytes("café".encode("latin-1"))
    assert "is not UTF-8 text" in await fs.refused("read", path="latin.txt")


# The head of an image of each other kind: what its signature is read from.
JPEG_HEAD = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffd9")
GIF_1X1 = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
WEBP_HEAD = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00" + bytes.fromhex(
    "100710111188 88fe0700".replace(" ", "")
)


@pytest.mark.parametrize(
    ("name", "data", "media_type"),
    [
        ("shot.dat", PNG_1X1, "image/png"),
        ("photo.txt", JPEG_HEAD, "image/jpeg"),
        ("anim", GIF_1X1, "image/gif"),
        ("pic.png", WEBP_HEAD, "image/webp"),
    ],
)
async def test_read_returns_an_image_by_its_signature_to_a_model_that_accepts_images(
    fs: Files, name: str, data: bytes, media_type: str
) -> None:
    import base64

    (fs.root / name).write_bytes(data)
    result = await fs.result("read", path=name, model="anthropic:claude-sonnet-4-5")
    assert not result.is_error, result.content
    assert result.content == f"{name}: {media_type}, {len(data):,} bytes (the image is attached)"
    (image,) = result.images
    assert image.mime_type == media_type
    header, _, encoded = image.url.partition(",")
    assert header == f"data:{media_type};base64"
    assert base64.b64decode(encoded) == data


async def test_read_refuses_an_image_for_a_model_that_does_not_accept_images(
    fs: Files,
) -> None:
    (fs.root / "shot.png").write_bytes(PNG_1X1)
    result = await fs.result("read", path="shot.png", model="deepseek:deepseek-chat")
    assert result.is_error and result.images == ()
    assert result.content == (
        "shot.png is an image (image/png), not a text file; the model in use "
        "(deepseek:deepseek-chat) does not accept images (if it does, set images: true "
        "in its entry of the llm models settings)"
    )


async def test_read_refuses_an_image_over_the_cap(tmp_path: Path) -> None:
    async with file_tools(tmp_path, max_image_bytes=1000) as files:
        (files.root / "big.png").write_bytes(PNG_1X1 + b"\0" * 1000)
        result = await files.result("read", path="big.png", model="offline")
        assert result.is_error and result.images == ()
        assert result.content == (
            f"big.png is an image of {len(PNG_1X1) + 1000:,} bytes, over the 1,000-byte "
            "cap for images"
        )


async def test_permission_denied_is_an_error_result(
    fs: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fs.root / "locked.txt").write_text("secret\n")
    real_open = Beneath.open

    def denying_open(self: Beneath, path: str, *args: int) -> int:
        if path.endswith("locked.txt"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(self, path, *args)

    monkeypatch.setattr(Beneath, "open", denying_open)
    assert await fs.refused("read", path="locked.txt") == "permission denied: locked.txt"


# -- write ----------------------------------------------------------------------------


async def test_write_creates_files_and_parent_directories(fs: Files) -> None:
    answer = await fs.ok("write", path="new/deep/file.txt", content="one\ntwo\n")
    assert answer == "created new/deep/file.txt (2 lines)"
    assert (fs.root / "new/deep/file.txt").read_text() == "one\ntwo\n"
    assert leftovers(fs.root / "new/deep") == []


async def test_write_refuses_to_overwrite_a_file_it_never_read(fs: Files) -> None:
    (fs.root / "kept.txt").write_text("mine\n")
    reason = await fs.refused("write", path="kept.txt", content="theirs\n")
    # The refusal says what to call next.
    assert reason == (
        "kept.txt has not been read in this session: call the read tool with "
        '{"path": "kept.txt"} first, then repeat this call unchanged'
    )
    assert (fs.root / "kept.txt").read_text() == "mine\n"
    await fs.ok("read", path="kept.txt")
    assert (
        await fs.ok("write", path="kept.txt", content="theirs\n") == "overwrote kept.txt (1 line)"
    )


async def test_overwrite_keeps_the_file_mode(fs: Files) -> None:
    script = fs.root / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o751)
    await fs.ok("read", path="run.sh")
    await fs.ok("write", path="run.sh", content="echo bye\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    await fs.ok("edit", path="run.sh", old_string="bye", new_string="ciao")
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.read_text() == "echo ciao\n"


async def test_a_failed_write_leaves_the_file_whole_and_no_temporary(
    fs: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = fs.root / "a.txt"
    target.write_text("original\n")
    await fs.ok("read", path="a.txt")

    def failing_rename(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", failing_rename)
    reason = await fs.refused("edit", path="a.txt", old_string="original", new_string="new")
    assert reason == "a.txt: No space left on device"
    assert target.read_text() == "original\n"
    assert leftovers(fs.root) == []


# -- edit -----------------------------------------------------------------------------


async def test_edit_replaces_a_unique_string(fs: Files) -> None:
    (fs.root / "a.py").write_text("def f():\n    return 1\n")
    await fs.ok("read", path="a.py")
    answer = await fs.ok("edit", path="a.py", old_string="return 1", new_string="return 2")
    assert answer.startswith("edited a.py: 1 replacement; the first change is at line 2:")
    assert "     2\t    return 2" in answer
    assert (fs.root / "a.py").read_text() == "def f():\n    return 2\n"


async def test_edit_refuses_missing_and_ambiguous_strings_then_replace_all_works(
    fs: Files,
) -> None:
    (fs.root / "a.txt").write_text("x = 1\nx = 1\n")
    await fs.ok("read", path="a.txt")
    assert "was not found in a.txt" in await fs.refused(
        "edit", path="a.txt", old_string="y = 1", new_string="y = 2"
    )
    assert "occurs 2 times in a.txt" in await fs.refused(
        "edit", path="a.txt", old_string="x = 1", new_string="x = 2"
    )
    assert "the same" in await fs.refused("edit", path="a.txt", old_string="x", new_string="x")
    answer = await fs.ok(
        "edit", path="a.txt", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert "2 replacements" in answer
    assert (fs.root / "a.txt").read_text() == "x = 2\nx = 2\n"


async def test_a_failed_edit_says_which_call_to_make_next(fs: Files) -> None:
    (fs.root / "a.py").write_text("def f():\n    return 1\n")
    await fs.ok("read", path="a.py")
    assert await fs.refused("edit", path="a.py", old_string="return 0", new_string="x") == (
        'old_string was not found in a.py; call the read tool with {"path": "a.py"} to see '
        "its current text, then call edit again with old_string copied from it exactly "
        "(whitespace and indentation included)"
    )
    # Copied from read's output with its line numbers: said as such.
    numbered = "     2\t    return 1"
    assert "holds the line numbers that read shows" in await fs.refused(
        "edit", path="a.py", old_string=numbered, new_string="    return 2"
    )
    assert "give the changed text as new_string" in await fs.refused(
        "edit", path="a.py", old_string="f", new_string="f"
    )
    # A call with every argument null, as small models make: what edit needs, and write.
    reason = await fs.refused("edit", path="a.py", old_string=None, new_string=None)
    assert "call the write tool with path and content" in reason
    (fs.root / "blob").write_bytes(b"\0\1")
    assert "with the bash tool instead" in await fs.refused("read", path="blob")
    (fs.root / "b.txt").write_text("b\n")
    assert await fs.refused("glob", pattern="*", path="b.txt") == (
        "b.txt is not a directory; give a directory as path, or call the read tool with "
        '{"path": "b.txt"}'
    )
    assert "call grep again with a Python regular expression" in await fs.refused(
        "grep", pattern="f(("
    )


async def test_several_edits_apply_all_or_none(fs: Files) -> None:
    target = fs.root / "a.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    await fs.ok("read", path="a.txt")
    failing = [
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "delta", "new_string": "DELTA"},
    ]
    reason = await fs.refused("edit", path="a.txt", edits=failing)
    assert reason.startswith("edit 2: old_string was not found")
    assert target.read_text() == "alpha\nbeta\ngamma\n"
    good = [
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "gamma", "new_string": "GAMMA"},
    ]
    assert "2 replacements" in await fs.ok("edit", path="a.txt", edits=good)
    assert target.read_text() == "ALPHA\nbeta\nGAMMA\n"
    assert "not both" in await fs.refused(
        "edit", path="a.txt", old_string="a", new_string="b", edits=good
    )
    assert "edit needs old_string (the exact text to replace, as read shows it) and new_string" in (
        await fs.refused("edit", path="a.txt")
    )


async def test_an_edit_is_refused_when_the_file_changed_since_it_was_read(fs: Files) -> None:
    target = fs.root / "a.txt"
    target.write_text("one\n")
    await fs.ok("read", path="a.txt")
    target.write_text("one, changed elsewhere\n")
    reason = await fs.refused("edit", path="a.txt", old_string="one", new_string="two")
    assert reason == (
        "a.txt changed on disk since it was last read: call the read tool with "
        '{"path": "a.txt"} again, then make this change again against what it shows'
    )
    assert target.read_text() == "one, changed elsewhere\n"
    await fs.ok("read", path="a.txt")
    await fs.ok("edit", path="a.txt", old_string="one", new_string="two")


async def test_a_file_rewritten_with_the_same_content_is_not_stale(fs: Files) -> None:
    target = fs.root / "a.txt"
    target.write_text("same\n")
    await fs.ok("read", path="a.txt")
    os.unlink(target)
    target.write_text("same\n")  # a new inode, the same text
    await fs.ok("edit", path="a.txt", old_string="same", new_string="new")


async def test_edits_chain_without_reading_again(fs: Files) -> None:
    (fs.root / "a.txt").write_text("a\n")
    await fs.ok("read", path="a.txt")
    await fs.ok("edit", path="a.txt", old_string="a", new_string="b")
    await fs.ok("edit", path="a.txt", old_string="b", new_string="c")
    assert (fs.root / "a.txt").read_text() == "c\n"


async def test_each_session_reads_for_itself(fs: Files) -> None:
    (fs.root / "a.txt").write_text("a\n")
    await fs.ok("read", path="a.txt")
    other = (await fs.world.get("agents").create(cwd=str(fs.root))).agent
    content, failed = await fs.call(
        "edit", agent=other, path="a.txt", old_string="a", new_string="b"
    )
    assert failed and "has not been read in this session" in content


async def test_files_over_the_size_cap_are_refused_whole(tmp_path: Path) -> None:
    async with file_tools(tmp_path, max_file_bytes=1000) as fs:
        (fs.root / "big.txt").write_text("z" * 2000 + "\n")
        await fs.ok("read", path="big.txt")  # pages are fine
        reason = await fs.refused("edit", path="big.txt", old_string="z", new_string="y")
        assert "over the 1,000-byte cap" in reason
        assert "over the 1,000-byte cap" in await fs.refused(
            "write", path="new.txt", content="q" * 1001
        )
        assert not (fs.root / "new.txt").exists()


# -- the workspace ----------------------------------------------------------------------


async def test_paths_leaving_the_workspace_need_approval(fs: Files, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("out\n")
    reason = await fs.refused("read", path="../outside.txt")
    assert "is outside the workspace" in reason and "needs the user's approval" in reason
    content, failed = await fs.call("read", path="../outside.txt", approved=True)
    assert not failed and content == "     1\tout"
    assert "outside the workspace" in await fs.refused("write", path=str(outside), content="x")
    assert outside.read_text() == "out\n"


async def test_a_symlink_out_of_the_workspace_is_outside(fs: Files, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    (fs.root / "link.txt").symlink_to(tmp_path / "secret.txt")
    assert "is outside the workspace" in await fs.refused("read", path="link.txt")
    (fs.root / "dirlink").symlink_to(tmp_path)
    assert "is outside the workspace" in await fs.refused("read", path="dirlink/secret.txt")


async def test_a_symlink_inside_the_workspace_is_written_through(fs: Files) -> None:
    (fs.root / "real.txt").write_text("v1\n")
    (fs.root / "alias.txt").symlink_to(fs.root / "real.txt")
    await fs.ok("read", path="alias.txt")
    await fs.ok("edit", path="alias.txt", old_string="v1", new_string="v2")
    assert (fs.root / "alias.txt").is_symlink()
    assert (fs.root / "real.txt").read_text() == "v2\n"


async def test_outside_workspace_deny_and_allow(tmp_path: Path) -> None:
    (tmp_path / "o.txt").write_text("o\n")
    async with file_tools(tmp_path / "d", outside_workspace="deny") as fs:
        content, failed = await fs.call("read", path=str(tmp_path / "o.txt"), approved=True)
        assert failed and "access there is denied" in content
    async with file_tools(tmp_path / "a", outside_workspace="allow") as fs:
        assert await fs.ok("read", path=str(tmp_path / "o.txt")) == "     1\to"


# -- glob and grep ------------------------------------------------------------------------


def tree(root: Path) -> None:
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle in git\n")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("import os\nneedle = 1\n")
    (root / "src" / "b.py").write_text("print('no')\n")
    (root / "src" / "c.txt").write_text("a needle\nand another needle\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("needle\n")
    (root / "debug.log").write_text("needle\n")
    (root / "blob.bin").write_bytes(b"needle\0\0")
    os.utime(root / "src" / "a.py", (1000, 1000))
    os.utime(root / "src" / "c.txt", (3000, 3000))


async def test_glob_lists_matches_newest_first_and_respects_gitignore(fs: Files) -> None:
    tree(fs.root)
    os.utime(fs.root / "src" / "b.py", (2000, 2000))
    assert (await fs.ok("glob", pattern="**/*.py")).splitlines() == ["src/b.py", "src/a.py"]
    assert (await fs.ok("glob", pattern="*.py", path="src")).splitlines() == [
        "src/b.py",
        "src/a.py",
    ]
    assert (await fs.ok("glob", pattern="src/*.{py,txt}")).splitlines() == [
        "src/c.txt",
        "src/b.py",
        "src/a.py",
    ]
    assert await fs.ok("glob", pattern="*.rs") == "no files match *.rs"
    assert "is never closed" in await fs.refused("glob", pattern="src/[ab.py")
    assert "does not exist" in await fs.refused("glob", pattern="*", path="missing")


async def test_grep_output_modes(fs: Files) -> None:
    tree(fs.root)
    files = (await fs.ok("grep", pattern="needle")).splitlines()
    assert files == ["src/c.txt", "src/a.py"]  # newest first; ignored, .git and binary skipped
    content = await fs.ok("grep", pattern="needle", output_mode="content")
    assert content.splitlines() == [
        "src/a.py:2:needle = 1",
        "src/c.txt:1:a needle",
        "src/c.txt:2:and another needle",
    ]
    counts = await fs.ok("grep", pattern="needle", output_mode="count")
    assert counts.splitlines() == ["src/a.py:1", "src/c.txt:2"]
    around = await fs.ok("grep", pattern="^needle", output_mode="content", context=1)
    assert around.splitlines() == ["src/a.py-1-import os", "src/a.py:2:needle = 1"]
    only_py = await fs.ok("grep", pattern="needle", glob="*.py")
    assert only_py == "src/a.py"
    assert await fs.ok("grep", pattern="NEEDLE", ignore_case=True, path="src/a.py") == "src/a.py"
    assert await fs.ok("grep", pattern="absent") == "no matches for absent"
    limited = await fs.ok("grep", pattern="needle", output_mode="content", head_limit=1)
    assert limited.splitlines() == [
        "src/a.py:2:needle = 1",
        "[2 more not shown; narrow the search]",
    ]


async def test_grep_refuses_invalid_regexes_and_globs(fs: Files) -> None:
    assert "invalid regular expression '('" in await fs.refused("grep", pattern="(")
    assert "is never closed" in await fs.refused("grep", pattern="x", glob="{a,b")


async def test_a_cancelled_search_stops(fs: Files) -> None:
    tree(fs.root)
    signal = CancelSignal()
    signal.cancel("user")
    content, failed = await fs.call("grep", pattern="needle", signal=signal)
    assert failed and "cancelled" in content


async def test_bad_arguments_name_the_field(fs: Files) -> None:
    content, failed = await fs.call("read", path="a.txt", offset=0)
    assert failed and "offset" in content
    content, failed = await fs.call("read")
    assert failed and "path" in content
    assert await fs.refused("read", path="") == (
        "the path is empty; give path: the file's path relative to the working directory"
    )


QUERIES = [
    {"pattern": "needle"},
    {"pattern": "needle", "output_mode": "content"},
    {"pattern": "needle", "output_mode": "count"},
    {"pattern": "^needle", "output_mode": "content", "context": 1},
    {"pattern": "needle", "glob": "*.py", "output_mode": "content"},
    {"pattern": "NEEDLE", "ignore_case": True},
    {"pattern": "-x"},
    {"pattern": "absent"},
]


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed")
async def test_ripgrep_and_python_give_the_same_answers(tmp_path: Path) -> None:
    answers: dict[str, list[tuple[str, bool]]] = {}
    for engine in ("rg", "python"):
        async with file_tools(tmp_path / engine, grep_engine=engine) as fs:
            tree(fs.root)
            (fs.root / "src" / "dash.txt").write_text("a -x flag\n")
            os.utime(fs.root / "src" / "dash.txt", (500, 500))
            answers[engine] = [await fs.call("grep", **query) for query in QUERIES]
    assert answers["rg"] == answers["python"]
    assert answers["rg"][1][0].splitlines()[0] == "src/a.py:2:needle = 1"


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep is not installed")
async def test_a_pattern_ripgrep_cannot_run_is_searched_in_python(tmp_path: Path) -> None:
    async with file_tools(tmp_path, grep_engine="rg") as fs:
        tree(fs.root)
        found = await fs.ok("grep", pattern=r"(?<=a )needle", output_mode="content")
        assert found == "src/c.txt:1:a needle"


async def test_grep_engine_rg_without_rg_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    async with file_tools(tmp_path, grep_engine="rg") as fs:
        assert await fs.refused("grep", pattern="x") == "grep_engine is rg, but rg is not installed"


async def test_durable_writes_fsync_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tether-tmp"):  # not the session log's
            order.append("fsync")
        real_fsync(fd)

    def rename(src: str, dst: str, **dir_fds: int) -> None:
        if str(src).endswith(".tether-tmp"):
            order.append("rename")
        real_rename(src, dst, **dir_fds)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    async with file_tools(tmp_path / "durable", durable_writes=True) as fs:
        await fs.ok("write", path="a.txt", content="kept\n")
        assert order == ["fsync", "rename"]
    order.clear()
    async with file_tools(tmp_path / "default") as fs:
        await fs.ok("write", path="a.txt", content="kept\n")
        assert order == ["rename"]


async def test_a_special_file_is_refused_by_read_and_passed_over_by_a_search(
    tmp_path: Path,
) -> None:
    # The Python engine: ripgrep itself reads an ignore file that is a FIFO and waits.
    async with file_tools(tmp_path, grep_engine="python") as fs:
        (fs.root / "a.txt").write_text("a needle\n")
        os.mkfifo(fs.root / ".gitignore")
        # A writer holds the FIFO open with nothing written: a read gets no bytes yet.
        writer = os.open(fs.root / ".gitignore", os.O_RDWR | os.O_NONBLOCK)
        try:
            assert "is not a regular file" in await fs.refused("read", path=".gitignore")
            assert (await fs.ok("grep", pattern="needle")).splitlines() == ["a.txt"]
            assert "a.txt" in await fs.ok("glob", pattern="*")
        finally:
            os.close(writer)
