"""``tether run`` on a real pseudo-terminal: Markdown, colours, a spinner; plain with NO_COLOR."""

from __future__ import annotations

from pathlib import Path

from tests.cli.terminal import CTRL_C, Terminal

TASK = "hello **bold** and `code`"


def test_run_on_a_terminal_renders_markdown_and_spins_while_waiting(tmp_path: Path) -> None:
    run = Terminal(tmp_path, TASK, command="run")
    try:
        assert run.finish() == 0
    finally:
        run.close()
    raw = "".join(run.raw)
    assert "waiting for the model" in raw  # the spinner, before the first token
    assert 'You said: "hello \x1b[1mbold\x1b[0m' in raw  # Markdown, rendered in colour
    assert 'You said: "hello bold and code"' in run.output()


def test_run_with_no_color_on_a_terminal_is_plain_text(tmp_path: Path) -> None:
    run = Terminal(tmp_path, TASK, command="run", env={"NO_COLOR": "1"})
    try:
        assert run.finish() == 0
    finally:
        run.close()
    raw = "".join(run.raw)
    assert f'You said: "{TASK}"' in raw
    assert "\x1b" not in raw and "waiting for the model" not in raw


def test_ctrl_c_cancels_a_run_on_a_terminal_with_status_130(tmp_path: Path) -> None:
    run = Terminal(tmp_path, "$ sleep 30", command="run")
    try:
        run.expect("→ bash sleep 30")
        run.send(CTRL_C)
        run.expect("cancelling (Ctrl-C again to exit now)")
        assert run.finish() == 130
    finally:
        run.close()
    assert "tether: cancelled by user" in run.output()


async def test_the_answer_shows_as_it_streams_before_its_line_is_complete(tmp_path: Path) -> None:
    import asyncio

    from tests.acp.harness import fake_model_overlay
    from tests.adapters.fake_server import FakeServer, stream
    from tests.adapters.support import delta

    async with FakeServer() as server:
        hold, reached = asyncio.Event(), asyncio.Event()
        server.queue(stream([delta("The answer is on its w")], hold=hold, reached=reached))
        overlay = tmp_path / "model.yml"
        overlay.write_text(fake_model_overlay(server.url, "sk-stream-0123456789"))
        run = Terminal(
            tmp_path,
            "--model",
            "openai-compatible:m",
            "hi",
            command="run",
            options=("--config", str(overlay)),
        )
        try:
            await asyncio.wait_for(reached.wait(), 30)
            # Half a line, and the model still writing: it is on the screen already.
            await asyncio.to_thread(run.expect, "The answer is on its w", 30)
            run.send(CTRL_C)
            assert await asyncio.to_thread(run.finish) == 130
        finally:
            hold.set()
            run.close()


def test_an_edit_s_diff_is_headed_by_the_lines_it_changes_in_the_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_text("one\ntwo\nthree\nfour\nfive\nsix\n")
    task = "edit f.txt: five => FIVE"
    run = Terminal(tmp_path, "--cwd", str(work), "--mode", "auto", task, command="run")
    try:
        assert run.finish() == 0
    finally:
        run.close()
    shown = run.output()
    assert "@@ -5 +5 @@" in shown  # line 5 of f.txt, not line 1 of the call's text
    assert "@@ -1 +1 @@" not in shown
    assert (work / "f.txt").read_text().splitlines()[4] == "FIVE"
