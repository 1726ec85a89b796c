"""How the work is shown, without a terminal: Markdown cut into pieces, colours where wanted."""

from __future__ import annotations

import io

import pytest

from tether.cli.surface import MarkdownLines, RichSurface
from tether.cli.terminal import colours_wanted


def pieces(*deltas: str, width: int = 1 << 30) -> list[tuple[str, str]]:
    handed: list[tuple[str, str]] = []
    lines = MarkdownLines(
        lambda text: handed.append(("block", text)),
        lambda line: handed.append(("code", line)),
        lambda: width,
    )
    for delta in deltas:
        lines.feed(delta)
    lines.finish()
    return handed


def test_each_line_is_handed_over_once_tables_whole_and_code_line_by_line() -> None:
    handed = pieces("# Ti", "tle\n\npara", " one\n| a |", " b |\n|---|---|\n| 1 | 2 |\n")
    handed += pieces("```py\nx = 1\n", "y = 2\n```\nafter")
    assert handed == [
        ("block", "# Title"),
        ("block", ""),
        ("block", "para one"),
        ("block", "| a | b |\n|---|---|\n| 1 | 2 |"),
        ("code", "x = 1"),
        ("code", "y = 2"),
        ("block", "after"),
    ]


def test_a_line_longer_than_the_screen_is_shown_as_it_streams_cut_outside_bold() -> None:
    handed = pieces("one two **three four** five ", "six seven", width=16)
    assert handed[0] == ("block", "one two")  # not inside the bold
    assert handed[1][1].startswith("**three four**")
    assert " ".join(text for _, text in handed) == "one two **three four** five six seven"


def test_a_cut_never_starts_a_list_or_a_heading() -> None:
    handed = pieces("word " * 3 + "- not a list item, the rest of a line", width=16)
    assert all(not text.startswith("- ") for _, text in handed)


def test_rendered_lines_carry_no_padding() -> None:
    out = io.StringIO()
    surface = RichSurface(out)
    surface.console.width = 60
    surface.answer("- item\n- other\n")
    surface.end_block()
    for line in out.getvalue().splitlines():
        assert not line.endswith(" ")
    assert out.getvalue().count("\n") == 2  # no blank line between the items


def test_colours_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert colours_wanted(Terminal())
    assert not colours_wanted(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colours_wanted(Terminal())


def shown_for(events: list[object], **options: object) -> str:
    """What a plain WorkView writes (both streams) for these payloads."""
    from tests.session.builders import new_session
    from tether.cli.surface import PlainSurface
    from tether.cli.work import WorkView
    from tether.session import Event, EventPayload

    out = io.StringIO()
    view = WorkView(PlainSurface(out, out), **options)  # type: ignore[arg-type]
    session = new_session()
    for seq, payload in enumerate(events):
        assert isinstance(payload, EventPayload)
        view(session, Event.from_payload(payload, seq=seq, time=1.0))
    return out.getvalue()


def test_reasoning_is_shown_only_when_asked() -> None:
    from tether.session import AssistantChunk

    events = [
        AssistantChunk(kind="reasoning", delta="let me see"),
        AssistantChunk(kind="text", delta="the answer"),
    ]
    assert shown_for(events) == "the answer"
    assert shown_for(events, thinking=True) == "thinking: let me see\nthe answer"


def test_a_turn_ends_with_its_tokens_and_cost_and_the_sessions() -> None:
    from tether.llm.catalog import ModelCatalog, ModelEntry, Prices
    from tether.llm.metering import UsageMeter
    from tether.session import AssistantMessageEvent, Completed, Errored, TurnEnd, TurnStart

    catalog = ModelCatalog({"m:x": ModelEntry(prices=Prices(input=1.0, output=2.0))})
    usage = {"input_tokens": 1_000_000, "output_tokens": 500_000}
    answer = AssistantMessageEvent(content=(), finish="stop", usage=usage)
    events = [
        TurnStart(turn=1),
        answer,
        TurnEnd(turn=1, reason=Completed()),
        TurnStart(turn=2),
        answer,
        TurnEnd(turn=2, reason=Errored(error="429", code="rate-limit")),
    ]
    shown = shown_for(events, meter=UsageMeter(catalog, "m:x")).splitlines()
    assert shown == [
        "tokens: 1,000,000 in, 500,000 out · 2.0000 USD (session 2.0000 USD)",
        "error: 429 — the provider is limiting requests or the quota is spent; wait, or check it",
        "tokens: 1,000,000 in, 500,000 out · 2.0000 USD (session 4.0000 USD)",
    ]


def test_a_terminal_marks_an_abandoned_attempt_and_clears_its_unfinished_line() -> None:
    from tether.cli.surface import ABANDONED, ERASE_LINE, RichSurface

    out = io.StringIO()
    surface = RichSurface(out)
    surface.answer("a first line\nhalf a li")
    surface.abandon()
    surface.answer("the answer\n")
    surface.answered()
    surface.end_block()
    shown = out.getvalue()
    assert shown.index("a first line") < shown.index(ABANDONED) < shown.index("the answer")
    assert ERASE_LINE + "\x1b" in shown  # the unfinished line gave way to the mark
    surface.abandon()  # nothing of a new attempt was shown: no mark
    assert out.getvalue().count(ABANDONED) == 1
