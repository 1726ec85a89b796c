"""User hooks held to real ``tether run`` calls, with real hook scripts.

The offline model turns ``$ CMD`` into one ``bash`` call. Each test writes a
small Python hook, a config shaped like Claude Code's ``settings.json``
``hooks`` block, and checks what ran, what the model was told, and what the
hook read on its stdin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_ask_mode import exit_status, results
from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for, session_id, tether
from tests.cli.test_permission_rules import on_a_terminal


def hook_script(tmp_path: Path, name: str, body: str) -> str:
    """A Python hook that reads its stdin JSON as ``event``, keeps it in ``NAME.seen`` in the
    workspace (the only place a sandboxed hook may write), and runs ``body``; its command."""
    path = tmp_path / "hooks" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    seen = str(tmp_path / "work" / f"{name}.seen")
    path.write_text(
        "import json, os, sys, pathlib\n"
        "event = json.load(sys.stdin)\n"
        f"pathlib.Path({seen!r}).write_text(json.dumps(event))\n" + body
    )
    return f"{sys.executable} {path}"


def config(tmp_path: Path, hooks: dict[str, object], **settings: object) -> Path:
    """A ``--config`` file with a ``hooks`` row whose ``hooks`` is ``hooks`` (pasted JSON)."""
    path = tmp_path / "hooks.yml"
    row = {"id": "hooks", "config": {"hooks": hooks, **settings}}
    path.write_text(json.dumps({"plugins": [row]}))
    return path


def pre_tool_use(
    command: str, matcher: str = "Bash", timeout: float | None = None
) -> dict[str, object]:
    hook: dict[str, object] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    return {"PreToolUse": [{"matcher": matcher, "hooks": [hook]}]}


def run(
    tmp_path: Path, hooks: dict[str, object], *args: str, status: int = 0
) -> tuple[str, list[dict[str, object]], str]:
    """``tether run ARGS`` with ``hooks``, ending with ``status``: its session id, the tool
    results, stderr."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    home = tmp_path / "home"
    done = tether(home, "--config", str(config(tmp_path, hooks)), "run", *args, cwd=work, input="")
    assert done.returncode == status, done.stderr
    sid = session_id(done.stderr)
    return sid, results(home, sid), done.stderr


def test_a_hook_that_exits_2_blocks_the_call_and_the_model_reads_its_stderr(
    tmp_path: Path,
) -> None:
    command = hook_script(
        tmp_path, "deny", "print('no touching here', file=sys.stderr)\nsys.exit(2)\n"
    )
    sid, [result], _ = run(tmp_path, pre_tool_use(command), "$ touch made")
    assert not (tmp_path / "work" / "made").exists()
    assert result["is_error"] is True
    assert "a PreToolUse hook blocked this call: no touching here" in str(result["content"])
    seen = json.loads((tmp_path / "work" / "deny.seen").read_text())
    assert seen["session_id"] == sid
    assert seen["hook_event_name"] == "PreToolUse"
    assert seen["tool_name"] == "Bash"
    assert seen["tool_input"]["command"] == "touch made"
    assert seen["cwd"] == str(tmp_path / "work")
    assert isinstance(seen["tool_use_id"], str)


def test_a_deny_decision_gives_its_reason_and_a_matcher_on_another_tool_is_not_run(
    tmp_path: Path,
) -> None:
    deny = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "policy says no",
        }
    }
    command = hook_script(tmp_path, "json_deny", f"print(json.dumps({deny!r}))\n")
    _, [result], _ = run(tmp_path, pre_tool_use(command, matcher="Edit|Write"), "$ touch a")
    assert (tmp_path / "work" / "a").exists()  # the matcher does not cover Bash
    assert not (tmp_path / "work" / "json_deny.seen").exists()
    _, [result], _ = run(tmp_path, pre_tool_use(command, matcher="Ba.*"), "$ touch b")
    assert not (tmp_path / "work" / "b").exists()
    assert "blocked this call: policy says no" in str(result["content"])


def test_a_hook_rewrites_the_arguments(tmp_path: Path) -> None:
    said = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": {"command": "touch rewritten"},
        }
    }
    command = hook_script(tmp_path, "rewrite", f"print(json.dumps({said!r}))\n")
    _, [result], _ = run(tmp_path, pre_tool_use(command), "$ touch original")
    assert result["is_error"] is False, result
    assert (tmp_path / "work" / "rewritten").exists()
    assert not (tmp_path / "work" / "original").exists()


def test_a_deny_rule_wins_over_a_hook_that_allows(tmp_path: Path) -> None:
    said = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
    command = hook_script(tmp_path, "allow", f"print(json.dumps({said!r}))\n")
    _, [result], _ = run(tmp_path, pre_tool_use(command), "--deny", "Bash(touch:*)", "$ touch x")
    assert not (tmp_path / "work" / "x").exists()
    assert "a permission rule denies this call" in str(result["content"])
    assert not (tmp_path / "work" / "allow.seen").exists()  # the rule decided before any hook ran


def test_a_hook_that_hangs_is_killed_with_its_group_at_its_timeout(tmp_path: Path) -> None:
    pgid_file = tmp_path / "work" / "pgid"
    body = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'])\n"
        f"pathlib.Path({str(pgid_file)!r}).write_text(str(os.getpgid(0)))\n"
        "time.sleep(300)\n"
    )
    command = hook_script(tmp_path, "hang", body)
    started = time.monotonic()
    _, [result], _ = run(tmp_path, pre_tool_use(command, timeout=1), "$ touch after")
    assert time.monotonic() - started < 30
    assert (tmp_path / "work" / "after").exists()  # fail open: the call ran
    assert result["is_error"] is False
    pgid = int(pgid_file.read_text())
    assert group_gone(pgid), f"process group {pgid} of the hook is still alive"


def group_gone(pgid: int, within: float = 5.0) -> bool:
    """Whether process group ``pgid`` is gone within ``within`` seconds (a killed member
    may take a moment to be reaped once its parent has exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_crashing_hook_or_bad_json_does_not_break_the_session(tmp_path: Path) -> None:
    crash = hook_script(tmp_path, "crash", "raise RuntimeError('boom')\n")
    garbage = hook_script(tmp_path, "garbage", "print('{not json')\n")
    hooks = {
        "PreToolUse": [
            {"matcher": "*", "hooks": [{"type": "command", "command": crash}]},
            {"matcher": "", "hooks": [{"type": "command", "command": garbage}]},
        ]
    }
    _, [result], stderr = run(tmp_path, hooks, "$ touch fine")
    assert result["is_error"] is False, result
    assert f"tether: hook {crash!r} failed (exit 1): RuntimeError: boom\n" in stderr
    assert f"tether: hook {garbage!r} printed JSON that cannot be read" in stderr
    assert (tmp_path / "work" / "fine").exists()
    assert (tmp_path / "work" / "crash.seen").exists() and (
        tmp_path / "work" / "garbage.seen"
    ).exists()


def test_post_tool_use_adds_context_and_a_block_reason_to_the_result(tmp_path: Path) -> None:
    said = {
        "decision": "block",
        "reason": "lint failed",
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": "remember the style guide",
        },
    }
    command = hook_script(tmp_path, "post", f"print(json.dumps({said!r}))\n")
    hooks = {
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": command}]}]
    }
    _, [result], _ = run(tmp_path, hooks, "$ echo ran")
    content = str(result["content"])
    assert "ran" in content
    assert "[PostToolUse hook] lint failed" in content
    assert "[PostToolUse hook] remember the style guide" in content
    seen = json.loads((tmp_path / "work" / "post.seen").read_text())
    assert seen["hook_event_name"] == "PostToolUse"
    assert "ran" in seen["tool_response"]["content"]


def test_user_prompt_submit_blocks_a_prompt_or_adds_context(tmp_path: Path) -> None:
    body = (
        "if 'secret' in event['prompt']:\n"
        "    print('prompts may not mention secrets', file=sys.stderr)\n"
        "    sys.exit(2)\n"
        "print('the build uses make')\n"
    )
    command = hook_script(tmp_path, "prompt", body)
    hooks = {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": command}]}]}
    sid, calls, stderr = run(tmp_path, hooks, "$ touch secret-file", status=1)
    assert calls == [] and not (tmp_path / "work" / "secret-file").exists()
    assert "a UserPromptSubmit hook blocked the prompt: prompts may not mention secrets" in stderr
    seen = json.loads((tmp_path / "work" / "prompt.seen").read_text())
    assert seen["hook_event_name"] == "UserPromptSubmit"
    assert seen["prompt"] == "$ touch secret-file"
    sid, [result], _ = run(tmp_path, hooks, "$ touch allowed")
    assert result["is_error"] is False
    assert (tmp_path / "work" / "allowed").exists()
    exported = tether(tmp_path / "home", "sessions", "export", sid).stdout
    assert "the build uses make" in exported


def test_an_unknown_event_or_a_bad_matcher_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for hooks, said in (
        ({"PreCompactt": []}, "unknown hook event"),
        ({"PreToolUse": [{"matcher": "(", "hooks": []}]}, "not a regular expression"),
    ):
        path = config(tmp_path, hooks)
        refused = tether(tmp_path, "--config", str(path), "run", "$ true", input="")
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("tether: error: plugin 'hooks': invalid config: config.hooks")
        assert said in last


def hanging(tmp_path: Path, event: str, prompt: str = "hello") -> tuple[subprocess.Popen[str], int]:
    """``tether run PROMPT`` with an ``event`` hook that starts a child and hangs: the
    running ``tether``, and the hook's process group once it is running."""
    pgid_file = tmp_path / "work" / "pgid"
    body = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'])\n"
        f"pathlib.Path({str(pgid_file)!r}).write_text(str(os.getpgid(0)))\n"
        "time.sleep(300)\n"
    )
    command = hook_script(tmp_path, "stuck", body)
    (tmp_path / "work").mkdir()
    argv = [sys.executable, "-m", "tether.cli.main", "--config"]
    hooks = {event: [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]}
    argv += [str(config(tmp_path, hooks)), "run", prompt]
    process = subprocess.Popen(
        argv,
        cwd=tmp_path / "work",
        env=env_for(tmp_path / "home"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not pgid_file.exists() or not pgid_file.read_text():
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the hook never started")
        time.sleep(0.05)
    return process, int(pgid_file.read_text())


def test_cancelling_the_turn_kills_a_running_hook_at_once(tmp_path: Path) -> None:
    run, pgid = hanging(tmp_path, "PreToolUse", "$ touch never")
    try:
        stopped = time.monotonic()
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert time.monotonic() - stopped < 15  # not the hook's 60 s timeout
    assert group_gone(pgid), f"process group {pgid} of the hook is still alive"
    assert not (tmp_path / "work" / "never").exists()
    sid = session_id(stderr)
    exported = tether(tmp_path / "home", "sessions", "export", sid).stdout.splitlines()
    ends = [json.loads(line) for line in exported[1:] if '"turn/end"' in line]
    assert ends[-1]["data"]["reason"]["kind"] == "aborted"
    (receipt,) = [json.loads(line) for line in exported[1:] if '"tool/stopped"' in line]
    (entry,) = receipt["data"]["stopped"]
    calls = [json.loads(line) for line in exported[1:] if '"tool/call"' in line]
    assert entry["kind"] == "hook" and entry["id"] == f"PreToolUse:{calls[0]['data']['id']}"
    assert entry["pgid"] == pgid


def test_on_a_terminal_an_allow_skips_the_question_and_an_ask_asks_in_auto_mode(
    tmp_path: Path,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    home.mkdir()
    body = (
        "decision = 'ask' if 'asked' in event['tool_input']['command'] else 'allow'\n"
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse',"
        " 'permissionDecision': decision}}))\n"
    )
    command = hook_script(tmp_path, "decide", body)
    # The user's own tether.yml this time.
    config(tmp_path, pre_tool_use(command)).rename(home / "tether.yml")
    pid, fd = on_a_terminal(home, work, "--mode", "ask", "$ touch fine")
    shown = expect(fd, "tokens:", [])
    assert exit_status(pid) == 0
    os.close(fd)
    assert "allow this" not in shown and (work / "fine").exists()
    pid, fd = on_a_terminal(home, work, "--mode", "auto", "$ touch asked")
    expect(fd, "allow this bash call", [])
    os.write(fd, b"y\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "asked").exists()
