"""Permission rules held to real ``tether run`` calls: flags, config files, a terminal.

The offline model turns ``$ CMD`` into one ``bash`` call, so each test gives
the command line a model would have written and checks what ran, what the
model was told and what the log says.
"""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path

from tests.cli.test_ask_mode import exit_status, results
from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for, session_id, tether


def ruled(home: Path, sid: str) -> list[dict[str, object]]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    return [r["data"] for r in records if r["type"] == "permission/ruled"]


def run(tmp_path: Path, *args: str) -> tuple[str, list[dict[str, object]], str]:
    """``tether run ARGS`` (stdin not a terminal): its session id, the tool results, stderr."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    done = tether(tmp_path / "home", "run", *args, cwd=work, input="")
    assert done.returncode == 0, done.stderr
    sid = session_id(done.stderr)
    return sid, results(tmp_path / "home", sid), done.stderr


def test_a_deny_rule_stops_the_call_names_the_rule_and_is_logged(tmp_path: Path) -> None:
    sid, [result], _ = run(tmp_path, "--deny", "Bash(touch:*)", "$ echo ok && touch made")
    assert not (tmp_path / "work" / "made").exists()
    assert result["is_error"] is True
    assert "a permission rule denies this call (Bash(touch:*))" in str(result["content"])
    [logged] = ruled(tmp_path / "home", sid)
    assert logged["decision"] == "deny" and logged["rules"] == ["Bash(touch:*)"]


def test_a_second_command_cannot_ride_past_an_allow_rule(tmp_path: Path) -> None:
    # Allowed by prefix, denied as a whole: the deny rule sees every command of the line.
    hostile = "$ git status; touch smuggled"
    _, [result], _ = run(
        tmp_path, "--allow", "Bash(git status:*)", "--deny", "Bash(touch:*)", hostile
    )
    assert not (tmp_path / "work" / "smuggled").exists()
    assert "denies this call (Bash(touch:*))" in str(result["content"])


def test_an_ask_rule_where_no_one_can_answer_does_not_run(tmp_path: Path) -> None:
    sid, [result], _ = run(tmp_path, "--ask", "Bash(touch:*)", "$ touch asked")
    assert not (tmp_path / "work" / "asked").exists()
    assert "no one here can answer" in str(result["content"])
    [logged] = ruled(tmp_path / "home", sid)
    assert (logged["decision"], logged["answer"]) == ("ask", "unanswered")


def test_an_unread_rule_is_one_line_and_exit_2(tmp_path: Path) -> None:
    refused = tether(tmp_path, "run", "--deny", "Bash(rm:*", "$ true", input="")
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith("tether: error: --deny: permission rule 'Bash(rm:*'")
    )
    config = tmp_path / "rules.yml"
    config.write_text("plugins:\n  - id: permissions\n    config:\n      allow: ['']\n")
    refused = tether(tmp_path, "--config", str(config), "run", "$ true", input="")
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "tether: error: plugin 'permissions': invalid config: config.allow.0: permission rule"
        )
    )
    assert not list((tmp_path / "sessions").glob("*.jsonl"))  # no agent ran without its rules


def test_the_user_and_the_project_rules_add_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "tether.yml").write_text(
        "plugins:\n  - id: permissions\n    config:\n      deny: ['Bash(touch:*)']\n"
    )
    project = tmp_path / "project.yml"
    project.write_text(
        "plugins:\n  - id: permissions\n    config:\n      deny: ['Bash(mkdir:*)']\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    for command, made in (("$ touch a", "a"), ("$ mkdir b", "b"), ("$ ls", None)):
        done = tether(home, "--config", str(project), "run", command, cwd=work, input="")
        [result] = results(home, session_id(done.stderr))
        assert result["is_error"] is (made is not None), result
        if made is not None:
            assert not (work / made).exists()


def on_a_terminal(home: Path, cwd: Path, *args: str) -> tuple[int, int]:
    argv = [sys.executable, "-m", "tether.cli.main", "run", *args]
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve(sys.executable, argv, env_for(home))
    return pid, fd


def test_an_ask_rule_asks_on_the_terminal_in_auto_mode_without_always(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    pid, fd = on_a_terminal(home, work, "--ask", "Bash(touch:*)", "$ touch asked")
    seen: list[str] = []
    shown = expect(
        fd, "allow this bash call (a permission rule asks: Bash(touch:*))? [y]es / [n]o: ", seen
    )
    os.write(fd, b"y\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "asked").exists()
    [logged] = ruled(home, session_id(shown))
    assert (logged["decision"], logged["answer"]) == ("ask", "allow")


def test_an_allow_rule_runs_unasked_in_ask_mode_and_a_smuggled_command_is_asked(
    tmp_path: Path,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    allow = ("--mode", "ask", "--allow", "Bash(touch:*)")
    pid, fd = on_a_terminal(home, work, *allow, "$ touch fine")
    seen: list[str] = []
    shown = expect(fd, "tokens:", seen)
    assert exit_status(pid) == 0
    os.close(fd)
    assert "allow this" not in shown and (work / "fine").exists()
    # The same rule does not cover a second command after it, nor a $( … ).
    for smuggled, choices in (
        ("$ touch a; rm fine", "[y]es / [n]o / [a]lways allow Bash(touch:*), Bash(rm:*): "),
        ("$ touch $(rm fine)", "[y]es / [n]o: "),
    ):
        pid, fd = on_a_terminal(home, work, *allow, smuggled)
        seen = []
        expect(fd, f"allow this bash call? {choices}", seen)
        os.write(fd, b"n\n")
        assert exit_status(pid) == 0
        os.close(fd)
        assert (work / "fine").exists()


def asked(home: Path, work: Path, sid: str | None, line: str, answer: bytes | None) -> str:
    """``tether run --mode ask LINE`` on a terminal (resuming ``sid``), answering its one
    question with ``answer`` (``None``: no question is expected); what it showed."""
    resume = ("--resume", sid) if sid is not None else ()
    pid, fd = on_a_terminal(home, work, "--mode", "ask", *resume, line)
    seen: list[str] = []
    if answer is None:
        shown = expect(fd, "tokens:", seen)
    else:
        shown = expect(fd, "allow this bash call? ", seen)
        shown += expect(fd, ": ", seen)
        os.write(fd, answer)
    assert exit_status(pid) == 0
    os.close(fd)
    return shown


def test_always_keeps_the_command_and_its_subcommand_and_asks_for_anything_else(
    tmp_path: Path,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    shown = asked(home, work, None, "$ git status", b"a\n")
    assert "[a]lways allow Bash(git status:*): " in shown
    sid = session_id(shown)
    # The kept rule covers git status with other options: not asked, and logged with the rule.
    shown = asked(home, work, sid, "$ git status -s", None)
    assert "allow this" not in shown
    assert ruled(home, sid)[-1]["rules"] == ["Bash(git status:*)"]
    # Another subcommand is asked; so is a line that adds a command the rule does not cover.
    assert "[a]lways allow Bash(git push:*): " in asked(home, work, sid, "$ git push", b"n\n")
    shown = asked(home, work, sid, "$ git status; touch x", b"n\n")
    assert "[a]lways allow Bash(touch:*): " in shown
    assert not (work / "x").exists()


def test_always_on_a_line_no_rule_may_allow_allows_it_once_and_says_why(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    shown = asked(home, work, None, "$ touch $(echo made)", b"a\n")
    assert "[ask] not always: the command line cannot be judged by a rule" in shown
    assert (work / "made").exists()
    sid = session_id(shown)
    shown = asked(home, work, sid, "$ touch $(echo again)", b"n\n")
    assert "[y]es / [n]o: " in shown and not (work / "again").exists()
    exported = tether(home, "sessions", "export", sid).stdout
    assert '"permission/granted"' not in exported
