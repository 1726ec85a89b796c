"""User hooks on a session's events (``Stop``, ``SessionStart``, ``SessionEnd``,
``PreCompact``, ``Notification``), held to real ``tether`` processes and real hook
scripts that keep every input they read, one JSON line each, in the workspace."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tests.cli.test_ask_mode import exit_status
from tests.cli.test_chat_compact import chat, quit_chat
from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import session_id, tether
from tests.cli.test_hooks import config, group_gone, hanging
from tests.cli.test_permission_rules import on_a_terminal


def recording_hook(tmp_path: Path, name: str, body: str = "") -> str:
    """A Python hook that appends the JSON it reads to ``NAME.jsonl`` in the workspace
    (``event`` in ``body``; ``calls`` counts the inputs before this one), then runs
    ``body``; its command."""
    path = tmp_path / "hooks" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    kept = str(tmp_path / "work" / f"{name}.jsonl")
    path.write_text(
        "import json, os, sys, pathlib\n"
        "event = json.load(sys.stdin)\n"
        f"kept = pathlib.Path({kept!r})\n"
        "calls = len(kept.read_text().splitlines()) if kept.exists() else 0\n"
        "with kept.open('a') as out:\n"
        "    out.write(json.dumps(event) + '\\n')\n" + body
    )
    return f"{sys.executable} {path}"


def asking_hook(tmp_path: Path) -> str:
    """A ``PreToolUse`` hook (recorded as ``ask``) that asks about the call, with the
    reason ``touching needs a look``; its command."""
    said = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": "touching needs a look",
        }
    }
    return recording_hook(tmp_path, "ask", f"print(json.dumps({said!r}))\n")


def read(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    """What the hook ``name`` read, one input per run."""
    path = tmp_path / "work" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def on(event: str, command: str, matcher: str | None = None) -> dict[str, object]:
    entry: dict[str, object] = {"hooks": [{"type": "command", "command": command}]}
    if matcher is not None:
        entry["matcher"] = matcher
    return {event: [entry]}


def exported(home: Path, sid: str) -> list[dict[str, Any]]:
    lines = tether(home, "sessions", "export", sid).stdout.splitlines()
    return [json.loads(line) for line in lines[1:]]


def run(
    tmp_path: Path, hooks: dict[str, object], *args: str, status: int = 0, **settings: object
) -> tuple[str, list[dict[str, Any]], str]:
    """``tether run ARGS`` with ``hooks``: its session id, its events, its stderr."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    home = tmp_path / "home"
    path = config(tmp_path, hooks, **settings)
    done = tether(home, "--config", str(path), "run", *args, cwd=work, input="")
    assert done.returncode == status, done.stderr
    sid = session_id(done.stderr)
    return sid, exported(home, sid), done.stderr


def test_a_stop_hook_that_blocks_keeps_the_turn_going_until_its_bound(tmp_path: Path) -> None:
    body = "print(json.dumps({'decision': 'block', 'reason': f'$ touch again-{calls}'}))\n"
    command = recording_hook(tmp_path, "stop", body)
    sid, events, stderr = run(tmp_path, on("Stop", command), "$ touch first", stop_continuations=2)
    work = tmp_path / "work"
    # The model read each reason as its next input, and acted on it.
    assert (work / "first").exists() and (work / "again-0").exists()
    assert (work / "again-1").exists() and not (work / "again-2").exists()
    seen = read(tmp_path, "stop")
    assert [e["stop_hook_active"] for e in seen] == [False, True, True]
    assert {e["hook_event_name"] for e in seen} == {"Stop"}
    assert seen[0]["session_id"] == sid
    # All of it is one turn, which completed.
    assert [e["type"] for e in events].count("turn/start") == 1
    (end,) = [e for e in events if e["type"] == "turn/end"]
    assert end["data"]["reason"]["kind"] == "completed"
    fed = [e["data"] for e in events if e["type"] == "user/message"]
    assert [m.get("source") for m in fed][1:] == ["hook", "hook"]
    assert "the turn ends (stop_continuations is 2)" in stderr


def test_a_stop_hook_that_lets_the_turn_end_or_fails_changes_nothing(tmp_path: Path) -> None:
    stop = recording_hook(tmp_path, "stop", "sys.exit(0)\n")
    broken = recording_hook(tmp_path, "broken", "sys.exit(1)\n")
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": c}]} for c in (stop, broken)]}
    _, events, _ = run(tmp_path, hooks, "$ touch once")
    assert [e["type"] for e in events].count("step/start") == 2  # the call, the summary
    assert len(read(tmp_path, "stop")) == 1 and len(read(tmp_path, "broken")) == 1


def test_a_child_agent_runs_subagent_stop_and_its_parent_runs_stop(tmp_path: Path) -> None:
    body = "if calls == 0:\n    print('$ touch child-again', file=sys.stderr)\n    sys.exit(2)\n"
    sub = recording_hook(tmp_path, "sub", body)
    stop = recording_hook(tmp_path, "stop")
    start = recording_hook(tmp_path, "start")
    hooks = {**on("SubagentStop", sub), **on("Stop", stop), **on("SessionStart", start)}
    task = '/tool task {"description": "touch", "prompt": "$ touch child-first"}'
    sid, _, _ = run(tmp_path, hooks, task)
    work = tmp_path / "work"
    assert (work / "child-first").exists() and (work / "child-again").exists()
    seen = read(tmp_path, "sub")
    assert [e["stop_hook_active"] for e in seen] == [False, True]
    assert {e["hook_event_name"] for e in seen} == {"SubagentStop"}
    assert seen[0]["session_id"] != sid  # the child's own session
    assert [e["session_id"] for e in read(tmp_path, "stop")] == [sid]
    assert [e["session_id"] for e in read(tmp_path, "start")] == [sid]


def test_session_start_gives_context_and_session_end_runs_at_the_end(tmp_path: Path) -> None:
    start = recording_hook(tmp_path, "start", "print('the build uses make')\n")
    end = recording_hook(tmp_path, "end", "print('ignored'); sys.exit(2)\n")
    hooks = {**on("SessionStart", start), **on("SessionEnd", end)}
    sid, events, _ = run(tmp_path, hooks, "hello")
    (started,) = read(tmp_path, "start")
    assert started["source"] == "startup" and started["session_id"] == sid
    assert started["hook_event_name"] == "SessionStart"
    context = next(e["data"] for e in events if e["type"] == "user/message")
    assert context["source"] == "hook"
    assert "the build uses make" in json.dumps(context["content"])
    (ended,) = read(tmp_path, "end")
    assert ended["reason"] == "other" and ended["session_id"] == sid
    _, _, _ = run(tmp_path, hooks, "--resume", sid, "again")
    assert [e["source"] for e in read(tmp_path, "start")] == ["startup", "resume"]
    assert len(read(tmp_path, "end")) == 2


def test_a_session_start_matcher_picks_its_source(tmp_path: Path) -> None:
    start = recording_hook(tmp_path, "start")
    run(tmp_path, on("SessionStart", start, matcher="resume"), "hello")
    assert read(tmp_path, "start") == []


def test_a_session_end_hook_that_hangs_does_not_hold_the_stop(tmp_path: Path) -> None:
    hang = recording_hook(tmp_path, "hang", "import time\ntime.sleep(300)\n")
    began = time.monotonic()
    run(tmp_path, on("SessionEnd", hang), "hello", end_timeout=1)
    assert time.monotonic() - began < 30  # not the hook's 60 s
    assert len(read(tmp_path, "hang")) == 1


def test_a_hook_running_at_a_cancel_is_killed_and_named_in_the_stop_receipt(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    process, pgid = hanging(tmp_path, "Stop")
    try:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert group_gone(pgid), f"process group {pgid} of the hook is still alive"
    events = exported(home, session_id(stderr))
    (receipt,) = [e["data"] for e in events if e["type"] == "tool/stopped"]
    (entry,) = receipt["stopped"]
    assert entry["kind"] == "hook" and entry["id"] == "Stop" and entry["pgid"] == pgid
    assert entry["signals"][0] == "SIGTERM"
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"]["kind"] == "aborted"
    assert "stopped hook Stop: process group" in stderr


def test_a_hook_does_not_outlive_a_killed_tether(tmp_path: Path) -> None:
    process, pgid = hanging(tmp_path, "UserPromptSubmit")
    try:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert group_gone(pgid, within=15), f"process group {pgid} of the hook outlived tether"


def test_a_notification_hook_runs_before_a_question_and_an_ask_names_its_hook(
    tmp_path: Path,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    home.mkdir()
    notify = recording_hook(tmp_path, "notify")
    ask = asking_hook(tmp_path)
    hooks = {**on("Notification", notify), **on("PreToolUse", ask, matcher="Bash")}
    config(tmp_path, hooks).rename(home / "tether.yml")
    pid, fd = on_a_terminal(home, work, "--mode", "auto", "$ touch asked")
    shown = expect(fd, "? [y]es / [n]o", [])
    assert f"asked by the PreToolUse hook {ask!r}: touching needs a look" in shown
    (notified,) = read(tmp_path, "notify")
    assert notified["hook_event_name"] == "Notification"
    assert notified["notification_type"] == "permission_prompt"
    assert notified["message"] == "tether needs your permission to use Bash"
    os.write(fd, b"y\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "asked").exists()


def test_in_chat_pre_compact_runs_and_session_start_says_compact(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    compact = recording_hook(tmp_path, "compact")
    start = recording_hook(tmp_path, "start", "print('after the summary')\n")
    stop = recording_hook(tmp_path, "stop")
    hooks = {**on("PreCompact", compact), **on("SessionStart", start), **on("Stop", stop)}
    path = config(tmp_path, hooks, sandboxed=False)  # the chat works in this checkout
    pid, fd = chat(tmp_path, "--config", str(path))
    seen: list[str] = []
    try:
        expect(fd, "you>", seen)
        # Each line typed, and what the chat says when it is done with it.
        for line, done in (
            (b"first question\r", "tokens: "),
            (b"second question\r", "tokens: "),
            (b"/compact\r", "the log keeps them)"),
            (b"third question\r", "tokens: "),
            (b"/clear\r", "earlier turns stay in the session log)"),
            (b"fourth question\r", "tokens: "),
        ):
            os.write(fd, line)
            expect(fd, done, seen)
            expect(fd, "you>", seen)
        quit_chat(pid, fd)
    finally:
        os.close(fd)
    (compacting,) = read(tmp_path, "compact")
    assert compacting["trigger"] == "manual" and compacting["custom_instructions"] == ""
    sources = [e["source"] for e in read(tmp_path, "start")]
    assert sources == ["startup", "compact", "clear"]
    assert len(read(tmp_path, "stop")) == 4  # one per turn


def test_the_users_hooks_and_a_projects_both_run_in_that_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "work").mkdir()
    order = tmp_path / "work" / "order"
    user = recording_hook(tmp_path, "user", f"open({str(order)!r}, 'a').write('user ')\n")
    project = recording_hook(tmp_path, "project", f"open({str(order)!r}, 'a').write('project')\n")
    row = {"id": "hooks", "config": {"hooks": on("UserPromptSubmit", user), "timeout": 30}}
    (home / "tether.yml").write_text(json.dumps({"plugins": [row]}))
    run(tmp_path, on("UserPromptSubmit", project), "hello")
    assert order.read_text() == "user project"
    refused = tether(home, "--config", str(config(tmp_path, ["not", "a", "block"])), "run", "hi")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "the hooks row's hooks must map event names to lists of matchers" in refused.stderr


def test_a_claude_code_settings_file_pointed_at_runs_its_hooks_unchanged(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / ".claude").mkdir(parents=True)
    deny = recording_hook(tmp_path, "deny", "print('not here', file=sys.stderr)\nsys.exit(2)\n")
    settings = {"permissions": {"allow": []}, "hooks": on("PreToolUse", deny, matcher="Bash")}
    (work / ".claude" / "settings.json").write_text(json.dumps(settings))
    pointed = {"claude_settings": [".claude/settings.json", "~/no/such/settings.json"]}
    _, events, _ = run(tmp_path, {}, "$ touch made", **pointed)
    (result,) = [e["data"] for e in events if e["type"] == "tool/result"]
    assert "a PreToolUse hook blocked this call: not here" in result["content"]
    assert not (work / "made").exists()
    (work / ".claude" / "settings.json").write_text('{"hooks": {"PreToolUse": 3}}')
    path = config(tmp_path, {}, **pointed)
    refused = tether(tmp_path / "home", "--config", str(path), "run", "hi", cwd=work, input="")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert ".claude/settings.json" in last and "hooks.PreToolUse must be a list" in last, last


def test_in_chat_session_end_says_prompt_input_exit_at_the_end_of_input(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    end = recording_hook(tmp_path, "end")
    path = config(tmp_path, on("SessionEnd", end), sandboxed=False)
    pid, fd = chat(tmp_path, "--config", str(path))
    try:
        session = expect(fd, "lists the commands)", []).split("session ", 1)[1].split()[0]
        expect(fd, "you>", [])
        os.write(fd, b"\x04")  # Ctrl-D: the end of input
        assert exit_status(pid) == 0
    finally:
        os.close(fd)
    (ended,) = read(tmp_path, "end")
    assert ended["reason"] == "prompt_input_exit" and ended["session_id"] == session


def test_in_chat_clear_and_new_run_session_end_clear(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    end = recording_hook(tmp_path, "end")
    start = recording_hook(tmp_path, "start")
    hooks = {**on("SessionEnd", end), **on("SessionStart", start)}
    path = config(tmp_path, hooks, sandboxed=False)
    pid, fd = chat(tmp_path, "--config", str(path))
    seen: list[str] = []
    try:
        expect(fd, "you>", seen)
        os.write(fd, b"/clear\r")
        expect(fd, "earlier turns stay in the session log)", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"a question\r")
        expect(fd, "tokens: ", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/new\r")  # the next session starts: this one ends "clear" too
        expect(fd, "lists the commands)", seen)
        expect(fd, "you>", seen)
        quit_chat(pid, fd)
    finally:
        os.close(fd)
    ended = [e["reason"] for e in read(tmp_path, "end")]
    assert ended == ["clear", "clear", "prompt_input_exit"]
    assert [e["source"] for e in read(tmp_path, "start")] == ["startup", "clear", "startup"]
