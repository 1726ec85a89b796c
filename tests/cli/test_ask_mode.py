"""``tether run --mode ask`` in a real pseudo-terminal: each tool call is put to the person."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for, session_id, tether
from tether.cli.asking import on_terminal
from tether.front.asking import asking_each_call
from tether.runtime.signal import CancelSignal
from tether.tools.definition import ToolExec
from tether.tools.presentation import ToolShown
from tether.tools.preview import ToolPreview


def run_on_a_terminal(home: Path, cwd: Path, *args: str) -> tuple[int, int]:
    argv = [sys.executable, "-m", "tether.cli.main", "run", "--mode", "ask", *args]
    pid, fd = pty.fork()
    if pid == 0:  # the child: tether run on the terminal
        os.chdir(cwd)
        os.execve(sys.executable, argv, env_for(home))
    return pid, fd


def exit_status(pid: int) -> int:
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def results(home: Path, sid: str) -> list[dict[str, object]]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    return [r["data"] for r in records if r["type"] == "tool/result"]


def test_a_refused_call_does_not_run_and_the_model_is_told(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    pid, fd = run_on_a_terminal(tmp_path / "home", work, "$ touch made-it")
    seen: list[str] = []
    shown = expect(fd, "allow this bash call? [y]es / [n]o / [a]lways allow Bash(touch:*): ", seen)
    assert "[ask] bash touch made-it" in shown
    os.write(fd, b"n\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert not (work / "made-it").exists()
    sid = session_id(shown)
    [result] = results(tmp_path / "home", sid)
    assert result["is_error"] is True and "did not allow" in str(result["content"])


def test_an_allowed_edit_shows_its_diff_first_and_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello world\n")
    pid, fd = run_on_a_terminal(tmp_path / "home", work, "edit notes.txt: world => tether")
    seen: list[str] = []
    # The offline model reads the file first (a read-only call: not asked), then edits it.
    shown = expect(fd, "allow this edit call?", seen)
    assert "→ read notes.txt" in shown and "allow this read call?" not in shown
    assert "-hello world" in shown and "+hello tether" in shown
    os.write(fd, b"a\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "notes.txt").read_text() == "hello tether\n"


def test_read_only_calls_are_asked_too_when_the_setting_says_so(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello world\n")
    config = tmp_path / "strict.yml"
    config.write_text("plugins:\n  - id: permissions\n    config: {read_only_unasked: false}\n")
    argv = ["--config", str(config), "run", "--mode", "ask", "edit notes.txt: world => x"]
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(work)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "tether.cli.main", *argv],
            env_for(tmp_path / "home"),
        )
    seen: list[str] = []
    expect(fd, "allow this read call? [y]es / [n]o / [a]lways allow read: ", seen)
    os.write(fd, b"y\n")
    expect(fd, "allow this edit call?", seen)
    os.write(fd, b"n\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "notes.txt").read_text() == "hello world\n"


def test_always_on_the_terminal_keeps_a_rule_and_a_resumed_session_keeps_it(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    pid, fd = run_on_a_terminal(home, work, "$ touch first")
    seen: list[str] = []
    shown = expect(fd, "allow this bash call? [y]es / [n]o / [a]lways allow Bash(touch:*): ", seen)
    os.write(fd, b"a\n")
    assert exit_status(pid) == 0
    os.close(fd)
    sid = session_id(shown)
    # The resumed run asks nothing: the rule is in the session's log…
    pid, fd = run_on_a_terminal(home, work, "--resume", sid, "$ touch second")
    seen = []
    with contextlib.suppress(AssertionError, ValueError):  # it ends, or waits, unasked
        expect(fd, "allow this", seen)
    assert "allow this" not in "".join(seen), "the resumed run asked again"
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "first").exists() and (work / "second").exists()
    # …and a command it does not cover is still asked.
    pid, fd = run_on_a_terminal(home, work, "--resume", sid, "$ touch third; rm first")
    seen = []
    expect(fd, "[y]es / [n]o / [a]lways allow Bash(rm:*): ", seen)
    os.write(fd, b"n\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "first").exists() and not (work / "third").exists()
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    grants = [json.loads(line)["data"] for line in exported[1:] if '"permission/granted"' in line]
    assert grants == [{"rule": "Bash(touch:*)"}]


def test_ask_mode_without_a_terminal_refuses_in_one_line(tmp_path: Path) -> None:
    refused = tether(tmp_path, "run", "--mode", "ask", "$ true", input="")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "tether: error: run: --mode ask asks on the terminal, and stdin is not one; "
        "give --mode auto"
    )


class Call(msgspec.Struct, frozen=True):
    """What the asker reads of a tool call: its tool, circumstances and preview."""

    tool_name: str
    exec: ToolExec
    approval: str | None = None
    args: dict[str, object] = msgspec.field(default_factory=dict)

    @property
    def tool(self) -> SimpleNamespace:
        return SimpleNamespace(shown=ToolShown(kind="edit", paths=("path",)))

    @property
    def shown_args(self) -> dict[str, object]:
        return self.args

    async def preview(self) -> ToolPreview:
        return ToolPreview(kind="edit", title=self.tool_name, approval=self.approval)


class Settings(msgspec.Struct):
    allowed: tuple[str, ...] = ()


class Log:
    """The part of a session the asker reads (its kept rules) and writes (a rule, a verdict)."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.ruled: list[tuple[str, ...]] = []

    def append(self, event: Any) -> None:
        if event.type == "permission/granted":
            self.settings.allowed += (event.rule,)
        else:
            self.ruled.append(event.rules)


class Asked(msgspec.Struct):
    session: Log
    id: str = "s"


async def test_always_on_an_edit_keeps_its_directory_never_a_call_needing_approval() -> None:
    agent = Asked(Log())
    asked: list[str] = []
    answers = iter(["a", "y"])

    async def ask(question: str) -> str:
        asked.append(question)
        return next(answers)

    ran: list[tuple[str, bool]] = []

    async def run(invocation: Any) -> Any:
        ran.append((invocation.tool_name, invocation.exec.approved))
        return invocation

    before_execute = asking_each_call(agent, on_terminal(io.StringIO(), ask))  # type: ignore[arg-type]
    exec_ = ToolExec(agent=None, call_id="c", signal=CancelSignal(), cwd="/w")
    msgspec.structs.force_setattr(exec_, "agent", agent)
    await before_execute(Call("write", exec_, args={"path": "docs/a.md"}), run)  # type: ignore[arg-type]
    # "always" on a write keeps every edit under its directory…
    assert asked[0].endswith("[a]lways allow Edit(docs/**)")
    assert agent.session.settings.allowed == ("Edit(docs/**)",)
    await before_execute(Call("edit", exec_, args={"path": "docs/b.md"}), run)  # type: ignore[arg-type]
    # …but not a call that needs approval whatever the mode: asked, and approved.
    await before_execute(  # type: ignore[arg-type]
        Call("write", exec_, approval="outside the workspace", args={"path": "docs/c.md"}), run
    )
    assert len(asked) == 2
    assert ran == [("write", True), ("edit", True), ("write", True)]


def exit_within(pid: int, fd: int, seconds: float) -> int:
    """The exit status of ``pid``, which must end within ``seconds`` (its terminal read
    meanwhile, so it never blocks writing); the process is killed if it does not."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            with contextlib.suppress(OSError):
                os.read(fd, 4096)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"still running {seconds} s after Ctrl-C (killed)")


def test_ctrl_c_at_the_question_stops_the_turn_and_exits_at_once(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    pid, fd = run_on_a_terminal(home, work, "$ touch made-it")
    seen: list[str] = []
    shown = expect(fd, "allow this bash call? [y]es / [n]o / [a]lways allow Bash(touch:*): ", seen)
    os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT
    assert exit_within(pid, fd, 5) == 130
    os.close(fd)
    assert not (work / "made-it").exists()
    sid = session_id(shown)
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    events = [json.loads(line) for line in exported[1:]]
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "cause": "user"}
    [result] = [e["data"] for e in events if e["type"] == "tool/result"]
    assert result["is_error"] is True


def test_ctrl_c_at_the_resume_picker_exits_at_once(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    assert tether(home, "run", "hello", cwd=work).returncode == 0
    pid, fd = run_on_a_terminal(home, work, "hello again", "--resume")
    seen: list[str] = []
    expect(fd, "resume which? [1-1, Enter: 1] ", seen)
    os.write(fd, b"\x03")
    assert exit_within(pid, fd, 5) == 130
    os.close(fd)


def test_the_answer_is_said_once_chosen(tmp_path: Path) -> None:
    from tests.cli.terminal import Terminal

    work = tmp_path / "work"
    work.mkdir()
    for answer, said in ((b"y\n", "[ask] allowed once"), (b"n\n", "[ask] denied")):
        run = Terminal(tmp_path / "home", "--mode", "ask", "$ echo hi", command="run", cwd=work)
        try:
            run.expect("allow this bash call?")
            run.send(answer)
            assert run.finish() == 0
        finally:
            run.close()
        shown = run.output()
        after = shown[shown.index("allow this bash call?") :]
        assert said in after and after.index(said) < after.index("← bash")


def test_an_edit_s_diff_is_shown_once_before_its_question(tmp_path: Path) -> None:
    from tests.cli.terminal import Terminal

    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello world\nsecond\n")
    task = "edit notes.txt: world => tether"
    run = Terminal(tmp_path / "home", "--mode", "ask", task, command="run", cwd=work)
    try:
        run.expect("allow this edit call?")
        run.send(b"y\n")
        assert run.finish() == 0
    finally:
        run.close()
    shown = run.output()
    asked = shown[: shown.index("allow this edit call?")]
    # Once, in the question: the change as the file's lines, not the call's text again.
    hunks = [line for line in asked.splitlines() if line.lstrip().startswith("@@")]
    assert len(hunks) == 1 and "+hello tether" in asked, asked
    assert "+tether" not in asked.replace("+hello tether", "")
    assert (work / "notes.txt").read_text() == "hello tether\nsecond\n"


async def test_arguments_left_null_are_not_shown_in_the_call_or_its_question(
    tmp_path: Path,
) -> None:
    import asyncio

    from tests.acp.harness import fake_model_overlay
    from tests.adapters.fake_server import FakeServer, stream
    from tests.adapters.support import call, delta
    from tests.cli.terminal import Terminal

    arguments = json.dumps({"command": "echo hi", "description": None, "timeout_ms": None})
    async with FakeServer() as server:
        server.queue(
            stream(
                [
                    delta(calls=[call(0, arguments, id="c1", name="bash")]),
                    delta(finish="tool_calls"),
                    "[DONE]",
                ]
            )
        )
        server.queue(stream([delta("ran it"), delta(finish="stop"), "[DONE]"]))
        overlay = tmp_path / "model.yml"
        overlay.write_text(fake_model_overlay(server.url, "sk-nulls-0123456789"))
        run = Terminal(
            tmp_path,
            "--model",
            "openai-compatible:m",
            "--mode",
            "ask",
            "run echo",
            command="run",
            options=("--config", str(overlay)),
        )
        try:
            await asyncio.to_thread(run.expect, "allow this bash call?", 30)
            run.send(b"y\n")
            assert await asyncio.to_thread(run.finish) == 0
        finally:
            run.close()
    shown = run.output()
    assert "→ bash echo hi\n" in shown and "[ask] bash echo hi\n" in shown
    assert "null" not in shown
