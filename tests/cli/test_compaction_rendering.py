"""A compaction as people see it: a line on stderr as it happens, the summary in transcripts."""

from __future__ import annotations

import io

from tests.session.builders import complete_turn, new_session
from tether.cli.render import transcript
from tether.cli.surface import PlainSurface
from tether.cli.work import WorkView
from tether.session import ContextCompacted, Session


def compacted_session() -> Session:
    session = new_session()
    complete_turn(session, "first")
    session.append(
        ContextCompacted(0, 9, "We listed the files.\nNext: fix the test.", "auto", "m", 99)
    )
    return session


def test_the_terminal_is_told_of_a_compaction_on_stderr_and_stdout_stays_the_answer() -> None:
    session = compacted_session()
    out, err = io.StringIO(), io.StringIO()
    view = WorkView(PlainSurface(out, err))
    view(session, session.events[-1])
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "(context compacted: events 0 to 9 summarized, the conversation neared the context "
        "window; the log keeps them)\n"
    )


def test_a_transcript_shows_the_summary_where_it_was_written() -> None:
    session = compacted_session()
    plain = list(transcript(session))
    at = plain.index(
        "(context compacted: events 0 to 9 summarized, the conversation neared the context "
        "window; the log keeps them)"
    )
    assert plain[at + 1 : at + 3] == ["    We listed the files.", "    Next: fix the test."]
    markdown = "\n".join(transcript(session, markdown=True))
    assert "> We listed the files.\n> Next: fix the test." in markdown
