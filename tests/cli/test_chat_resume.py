"""``chat --resume`` and ``--continue`` show the last turns of the stored log before the prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.terminal import Terminal
from tests.cli.test_commands import session_id, tether

PROMPTS = "first\n$ seq 1 20\nsay **bold**\nlast one\n"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A home with one session of four turns (one of them a tool call); its id."""
    home = tmp_path_factory.mktemp("resume")
    made = tether(home, "chat", input=PROMPTS)
    assert made.returncode == 0, made.stderr
    return home, session_id(made.stderr)


def test_plain_resume_shows_the_last_three_turns_and_counts_the_earlier(
    stored: tuple[Path, str],
) -> None:
    home, sid = stored
    resumed = tether(home, "chat", "--resume", sid[:-3], input="")
    assert resumed.returncode == 0, resumed.stderr
    shown = resumed.stderr
    assert f"… 1 earlier turn not shown (tether sessions show {sid} prints them)" in shown
    assert "> first" not in shown
    replayed = shown.split("earlier turn not shown", 1)[1]
    assert replayed.index("> $ seq 1 20") < replayed.index("> say **bold**")
    assert "→ bash seq 1 20" in replayed
    assert "… 15 more lines (/output 1 shows them all)" in replayed  # folded as live
    assert replayed.index("> last one") < replayed.index(f"session {sid}")
    # The answers go where a live chat writes them: plain, on stdout.
    assert 'You said: "say **bold**"' in resumed.stdout
    assert 'You said: "first"' not in resumed.stdout


def test_resume_on_a_terminal_renders_the_replayed_answers_as_markdown(
    stored: tuple[Path, str],
) -> None:
    home, sid = stored
    chat = Terminal(home, "--continue")
    try:
        shown = chat.expect(f"session {sid} · offline (/help lists the commands)")
        assert "1 earlier turn not shown" in shown
        replayed = shown.split("earlier turn not shown", 1)[1]
        assert 'You said: "say bold"' in replayed  # Markdown, rendered
        assert "→ bash seq 1 20" in replayed and "… 15 more lines" in replayed
        chat.expect("you>")
        chat.send(b"/output 1\r")  # a replayed result is there in full on request
        assert "\n20\n" in chat.expect("[exit code: 0]")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()


def test_resume_without_an_id_offers_the_directorys_recent_sessions_on_the_terminal(
    tmp_path: Path,
) -> None:
    from tests.cli.terminal import Terminal
    from tests.cli.test_commands import session_id, tether

    older = session_id(tether(tmp_path, "run", "the older one").stderr)
    newer = session_id(tether(tmp_path, "run", "the newer one").stderr)
    chat = Terminal(tmp_path, "--resume")
    try:
        listed = chat.expect("resume which? [1-2, Enter: 1]")
        assert listed.index(newer) < listed.index(older)
        assert "the newer one" in listed and "the older one" in listed
        chat.send(b"2\r")
        chat.expect(f"session {older} · offline (/help lists the commands)")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()


def test_resume_without_an_id_and_no_terminal_is_one_line(tmp_path: Path) -> None:
    from tests.cli.test_commands import tether

    tether(tmp_path, "run", "one")
    result = tether(tmp_path, "run", "--resume", "go on")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "tether: error: --resume without an id asks on the terminal which session; "
        "give an id, or --continue"
    )
