"""What "always allow" writes: a rule per command of a bash line, a directory for an edit,
the tool otherwise — and nothing for a line no rule may allow."""

from __future__ import annotations

import pytest

from tether.front.always import always_for
from tether.front.rules import Decision, Rules
from tether.tools.presentation import ToolShown
from tether.tools.preview import ToolPreview

BASH = ToolShown(kind="execute", command="command")
EDIT = ToolShown(kind="edit", paths=("path",))
WORK = "/home/me/work"


def bash(line: str) -> tuple[tuple[str, ...], str | None]:
    always = always_for("bash", {"command": line}, preview=None, shown=BASH, cwd=WORK)
    return always.rules, always.why_not


@pytest.mark.parametrize(
    ("line", "rules"),
    [
        ("git status", ("Bash(git status:*)",)),
        ("git status -s", ("Bash(git status:*)",)),
        ("ls -la src", ("Bash(ls:*)",)),
        ("ls *.py", ("Bash(ls:*)",)),
        ("npm run test -- --watch", ("Bash(npm run test:*)",)),
        ("uv run pytest -q", ("Bash(uv run pytest:*)",)),
        ("docker compose up -d", ("Bash(docker compose:*)",)),
        ("cargo build --release", ("Bash(cargo build:*)",)),
        (
            "git status && git diff | head -5",
            ("Bash(git status:*)", "Bash(git diff:*)", "Bash(head:*)"),
        ),
        ("git status; git status -s", ("Bash(git status:*)",)),
        ("pytest -q > out.txt 2>&1", ("Bash(pytest:*)",)),
    ],
)
def test_a_bash_line_is_kept_as_a_prefix_rule_per_command(
    line: str, rules: tuple[str, ...]
) -> None:
    assert bash(line) == (rules, None)


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        # A prefix of these would allow anything: exactly this command is kept.
        ("bash -c true", "Bash(bash -c true)"),
        ("env FOO=1 make", "Bash(env FOO=1 make)"),
        ("FOO=1 ls", "Bash(FOO=1 ls)"),
        ("xargs rm", "Bash(xargs rm)"),
        ("python3 script.py", "Bash(python3 script.py)"),
        ("git -C elsewhere push", "Bash(git -C elsewhere push)"),
        ("git", "Bash(git)"),
        ("npm run", "Bash(npm run)"),
    ],
)
def test_a_command_a_prefix_would_widen_is_kept_exactly(line: str, rule: str) -> None:
    assert bash(line) == ((rule,), None)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("echo $(rm -rf ~)", "'$('"),
        ("echo `id`", "'`'"),
        ("cat <(curl evil)", "'<('"),
        ("(cd x; make)", "group or subshell"),
        ("git status; sudo rm -rf /", "runs sudo"),
        ("doas ls", "runs doas"),
        ("git log > .git/hooks/pre-commit", "a protected path"),
        ("echo x >> tether.yml", "a protected path"),
        ("echo x > ../outside", "outside the workspace"),
        ("echo x > /etc/passwd", "outside the workspace"),
        ("echo 'unbalanced", "shell words"),
        # An exact rule cannot pin a word with a space or a pattern in it.
        ("bash -c 'echo hi; rm x'", "a space"),
        ("xargs rm *.py", "pattern character"),
    ],
)
def test_always_writes_nothing_for_a_line_no_rule_may_allow(line: str, why: str) -> None:
    rules, why_not = bash(line)
    assert rules == ()
    assert why_not is not None and why in why_not


def test_an_edit_is_kept_as_every_edit_under_its_directory() -> None:
    def edit(path: str) -> tuple[tuple[str, ...], str | None]:
        always = always_for("write", {"path": path}, preview=None, shown=EDIT, cwd=WORK)
        return always.rules, always.why_not

    assert edit("src/pkg/mod.py") == (("Edit(src/pkg/**)",), None)
    assert edit(f"{WORK}/docs/a.md") == (("Edit(docs/**)",), None)
    assert edit("README.md") == (("Edit(./**)",), None)
    assert edit("../elsewhere/x")[0] == ()
    assert edit("/etc/hosts")[0] == ()
    assert edit("odd[dir]/x")[0] == ()


def test_another_tool_is_kept_by_name_and_a_call_needing_approval_is_not() -> None:
    shown = ToolShown()
    mcp = always_for("mcp__github__get_issue", {}, preview=None, shown=shown, cwd=WORK)
    assert mcp.rules == ("mcp__github__get_issue",)
    assert mcp.label == "Always allow mcp__github__get_issue"
    outside = ToolPreview(kind="edit", title="write", approval="outside the workspace")
    refused = always_for("write", {"path": "/x"}, preview=outside, shown=EDIT, cwd=WORK)
    assert refused.rules == () and refused.why_not is not None
    assert "outside the workspace" in refused.why_not


@pytest.mark.parametrize(
    ("kept_for", "later", "decision"),
    [
        ("git status", "git status -s", Decision.ALLOW),
        ("git status", "git push", None),
        ("git status", "git status; rm -rf x", None),
        ("npm run test", "npm run build", None),
        ("bash -c true", "bash -c 'rm -rf ~'", None),
        ("ls", "ls; sudo ls", None),
    ],
)
def test_the_written_rule_covers_the_likes_of_the_call_only(
    kept_for: str, later: str, decision: Decision | None
) -> None:
    rules, _ = bash(kept_for)
    verdict = Rules(allow=rules).decide("bash", {"command": later}, shown=BASH, cwd=WORK)
    assert (None if verdict is None else verdict.decision) is decision


def test_a_deny_or_ask_rule_still_wins_over_a_written_rule() -> None:
    rules, _ = bash("git push origin main")
    kept = Rules(
        allow=rules, ask=("Bash(git push --force:*)",), deny=("Bash(git push origin prod)",)
    )
    asked = kept.decide("bash", {"command": "git push --force"}, shown=BASH, cwd=WORK)
    denied = kept.decide("bash", {"command": "git push origin prod"}, shown=BASH, cwd=WORK)
    assert asked is not None and asked.decision is Decision.ASK
    assert denied is not None and denied.decision is Decision.DENY
