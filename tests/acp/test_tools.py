"""Tool calls as ``tool_call`` / ``tool_call_update``, and permissions asked of the client."""

from pathlib import Path

from acp.schema import ToolCallProgress, ToolCallStart

from tests.acp.harness import serving


def tool_updates(updates: list[object]) -> list[tuple[str, str, str | None]]:
    """``(kind of update, status, title or output)`` of every tool update, in order."""
    shown: list[tuple[str, str, str | None]] = []
    for update in updates:
        if isinstance(update, ToolCallStart):
            shown.append(("tool_call", str(update.status), update.title))
        elif isinstance(update, ToolCallProgress):
            output = update.content[0].content.text if update.content else None  # type: ignore[union-attr]
            shown.append(("tool_call_update", str(update.status), output))
    return shown


async def test_a_bash_call_streams_its_start_progress_and_output(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "bash echo hi") == "end_turn"
        assert tool_updates(server.client.of(sid)) == [
            ("tool_call", "pending", "echo hi"),
            ("tool_call_update", "in_progress", None),
            ("tool_call_update", "completed", "hi\nexit code 0"),
        ]
        start = next(u for u in server.client.of(sid) if isinstance(u, ToolCallStart))
        assert start.kind == "execute" and start.raw_input == {"command": "echo hi"}
        assert server.client.text(sid) == "done: hi"
        assert await server.prompt(sid, "bash exit 3") == "end_turn"
        assert tool_updates(server.client.of(sid))[-1] == (
            "tool_call_update",
            "failed",
            "exit code 3",
        )
        assert server.client.permission_requests == []


async def test_ask_mode_asks_before_every_call_and_remembers_allow_always(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        client = server.client
        assert await server.prompt(sid, "bash echo once") == "end_turn"
        ((asked_sid, call, options),) = client.permission_requests
        assert asked_sid == sid and call.title == "echo once" and call.kind == "execute"
        assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
        assert tool_updates(client.of(sid))[-1][1] == "completed"

        client.answer = "allow-always"
        assert await server.prompt(sid, "bash echo twice") == "end_turn"
        client.answer = "reject-once"
        assert await server.prompt(sid, "bash echo thrice") == "end_turn"
        assert len(client.permission_requests) == 2  # allowed always: not asked again
        assert tool_updates(client.of(sid))[-1] == (
            "tool_call_update",
            "completed",
            "thrice\nexit code 0",
        )


async def test_rejections_and_failures_fail_closed(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        client = server.client
        for answer in ("reject-once", "cancelled", "error"):
            client.answer = answer
            assert await server.prompt(sid, f"bash echo {answer}") == "end_turn"
            status, output = tool_updates(client.of(sid))[-1][1:]
            assert status == "failed", answer
            assert output is not None and "denied" in output, answer
        assert len(client.permission_requests) == 3
        # Nothing ran: no output of any command reached the model.
        assert "exit code" not in server.client.text(sid)


async def test_set_mode_switches_between_ask_and_auto(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        await server.conn.set_session_mode(session_id=sid, mode_id="auto")
        assert await server.prompt(sid, "bash echo free") == "end_turn"
        assert server.client.permission_requests == []
        await server.conn.set_session_mode(session_id=sid, mode_id="ask")
        assert await server.prompt(sid, "bash echo asked") == "end_turn"
        assert len(server.client.permission_requests) == 1


async def test_a_permission_request_shows_the_same_arguments_as_the_tool_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("one line\n")
    async with serving(tmp_path, "--ask", "Read") as server:  # a read is asked only so
        sid = await server.new_session()
        # read's offset and limit are left to their defaults.
        assert await server.prompt(sid, 'call read {"path": "notes.txt"}') == "end_turn"
        start = next(u for u in server.client.of(sid) if isinstance(u, ToolCallStart))
        ((_sid, asked, _options),) = server.client.permission_requests
        assert start.raw_input == {"path": "notes.txt"}
        assert asked.tool_call_id == start.tool_call_id
        assert asked.raw_input == start.raw_input


async def test_a_running_command_s_output_is_shown_in_its_call_before_it_completes(
    tmp_path: Path,
) -> None:
    from tests.acp.test_orphans import REAL_BASH
    from tests.acp.test_schema_conformance import _check

    loop = "for n in 1 2 3 4 5 6; do echo line-$n; sleep 0.5; done"
    async with serving(tmp_path, "--mode", "auto", overlay=REAL_BASH) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, f"bash {loop}") == "end_turn"
        shown = tool_updates(server.client.of(sid))
        _check(server)  # every frame, the progress ones too, is valid by the schema
    statuses = [status for _, status, _ in shown]
    done = statuses.index("completed")
    running = [text for _, status, text in shown[:done] if status == "None" and text]
    # Partial output while it ran: some lines, not all of them yet, and its time so far.
    assert any("line-1" in text and "line-6" not in text for text in running), shown
    assert all(text.splitlines()[-1].startswith("[running ") for text in running)
    assert "[running" not in str(shown[done][2])  # the result replaced the progress
    assert len(running) <= 3 * 4  # about three seconds, at most four a second
