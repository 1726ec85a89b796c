"""OutputStream: the tail in memory, the whole stream on disk, reads that never repeat."""

import os
from pathlib import Path

import pytest

from tests.shell.support import text_of
from tether.shell.environment import child_environment
from tether.shell.output import OutputStream, SpillDir


def test_a_stream_within_its_limit_is_kept_whole_and_never_spilled(tmp_path: Path) -> None:
    spill = SpillDir(str(tmp_path))
    stream = OutputStream(10, lambda: spill.open("s"))
    stream.feed(b"12345")
    stream.feed(b"67890")
    stream.close()
    assert (stream.tail(), stream.truncated, stream.spill_path) == ("1234567890", False, None)
    assert spill.path is None


def test_a_stream_past_its_limit_keeps_the_tail_and_spills_everything(tmp_path: Path) -> None:
    spill = SpillDir(str(tmp_path))
    stream = OutputStream(4, lambda: spill.open("s"))
    for chunk in (b"ab", b"cd", b"efg", b"h"):
        stream.feed(chunk)
    stream.close()
    assert (stream.tail(), stream.truncated, stream.total) == ("efgh", True, 8)
    assert stream.spill_path is not None
    assert text_of(stream.spill_path) == "abcdefgh"


def test_take_hands_out_each_byte_once_and_reports_gaps() -> None:
    stream = OutputStream(4, None)
    stream.feed(b"ab")
    assert stream.take() == ("ab", False)
    assert stream.take() == ("", False)
    stream.feed(b"cdefgh")
    assert stream.take() == ("efgh", True)
    stream.feed(b"i")
    assert stream.take() == ("i", False)


def test_take_holds_back_a_character_split_across_chunks() -> None:
    stream = OutputStream(100, None)
    encoded = "é".encode()
    stream.feed(b"x" + encoded[:1])
    assert stream.take() == ("x", False)
    stream.feed(encoded[1:])
    assert stream.take() == ("é", False)
    stream.feed(encoded[:1])
    stream.close()
    assert stream.take() == ("\ufffd", False)


def test_a_spill_that_cannot_be_created_keeps_the_tail() -> None:
    def refuse() -> tuple[int, str]:
        raise PermissionError("no room")

    stream = OutputStream(3, refuse)
    stream.feed(b"abcdef")
    stream.close()
    assert (stream.tail(), stream.truncated, stream.spill_path) == ("def", True, None)


def test_a_removed_spill_directory_takes_its_files_and_refuses_new_ones(tmp_path: Path) -> None:
    spill = SpillDir(str(tmp_path))
    fd, path = spill.open("one")
    assert Path(path).parent.parent == tmp_path
    spill.remove()
    assert not Path(path).exists()
    with pytest.raises(OSError, match="removed"):
        spill.open("two")
    os.close(fd)


def test_the_environment_drops_secret_looking_names_in_any_case() -> None:
    inherited = {"API_KEY": "x", "my_token": "x", "Secret_A": "x", "PASSWORD": "x", "HOME": "/h"}
    env = child_environment({"EXTRA_TOKEN": "given"}, inherited)
    assert env == {
        "HOME": "/h",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "PAGER": "cat",
        "EXTRA_TOKEN": "given",
    }
