"""What a hook said, read by Claude Code's rules: per event, a block means something else."""

from __future__ import annotations

import json

from tether.front.hook_output import Verdict, read_verdict


def said(event: str, output: object, exit_code: int = 0, stderr: str = "") -> Verdict | None:
    """What the hook ``hook.sh`` of ``event`` said, exiting ``exit_code`` after printing
    ``output`` (JSON unless a string) and ``stderr``."""
    text = output if isinstance(output, str) else json.dumps(output)
    return read_verdict(event, "hook.sh", exit_code, text, stderr)


def verdict(event: str, output: object, exit_code: int = 0, stderr: str = "") -> Verdict:
    found = said(event, output, exit_code, stderr)
    assert found is not None
    return found


def test_continue_false_ends_a_stop_and_blocks_any_other_event() -> None:
    stop = {"continue": False, "stopReason": "enough", "decision": "block", "reason": "more"}
    assert verdict("Stop", stop).block is None
    assert verdict("SubagentStop", stop).block is None
    assert verdict("PreToolUse", stop).block == "enough"
    assert verdict("Stop", {"decision": "block", "reason": "run the tests"}).block == (
        "run the tests"
    )


def test_exit_2_blocks_with_stderr_and_other_exits_are_nothing() -> None:
    assert verdict("Stop", "", 2, "keep going\n").block == "keep going"
    assert verdict("Stop", "", 2).block == "(the hook gave no reason)"
    assert said("Stop", {"decision": "block"}, 1, "boom") is None


def test_plain_text_is_context_only_where_claude_code_takes_it() -> None:
    assert verdict("SessionStart", "on branch main").context == "on branch main"
    assert verdict("UserPromptSubmit", "notes").context == "notes"
    assert said("Stop", "some text") is None
    assert said("PostToolUse", "some text") is None
    assert said("SessionStart", "{not json") is None


def test_an_ask_keeps_its_reason_and_the_hook_that_said_it() -> None:
    asked = verdict(
        "PreToolUse",
        {
            "hookSpecificOutput": {
                "permissionDecision": "ask",
                "permissionDecisionReason": "needs a look",
                "additionalContext": 3,
            }
        },
    )
    assert asked.decision == "ask" and asked.reason == "needs a look"
    assert asked.command == "hook.sh" and asked.context is None
