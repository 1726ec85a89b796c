"""Typed keys: events and services named once, with their signatures, checked by mypy."""

import textwrap
from pathlib import Path

import pytest

from tether.runtime import Context, Notice, Runtime, ServiceKey, Waterfall

PING = Notice[str]("ping")


async def test_an_event_named_by_a_plain_string_is_refused(runtime: Runtime) -> None:
    with pytest.raises(TypeError, match="events are named by keys"):
        runtime.ctx.on("ping", lambda value: None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="events are named by keys"):
        runtime.ctx.emit("ping", "x")  # type: ignore[arg-type]


async def test_keys_with_one_name_are_one_event(runtime: Runtime) -> None:
    heard: list[str] = []
    runtime.ctx.on(PING, heard.append)
    runtime.ctx.emit(Notice[str]("ping"), "x")
    assert heard == ["x"]
    assert Notice("ping") == PING and hash(Notice("ping")) == hash(PING)
    assert Notice("ping") != Waterfall("ping")  # one name, another mode: another key


async def test_a_plugin_may_inject_a_service_by_its_key(runtime: Runtime) -> None:
    counter = ServiceKey[list[int]]("counter")
    seen: list[object] = []

    async def provider(ctx: Context, config: None) -> None:
        ctx.provide(counter, [1, 2])

    async def reader(ctx: Context, config: None) -> None:
        seen.append(ctx.service(counter))

    reader.inject = (counter,)  # type: ignore[attr-defined]
    await runtime.ctx.plugin(reader)
    assert seen == []
    await runtime.ctx.plugin(provider)
    assert seen == [[1, 2]]
    assert runtime.ctx.get(ServiceKey[int]("absent")) is None


def test_mypy_rejects_a_listener_or_a_dispatch_that_does_not_match_its_key(
    tmp_path: Path,
) -> None:
    from mypy import api

    program = tmp_path / "uses_keys.py"
    program.write_text(
        textwrap.dedent(
            """\
            from tether.agent import Agent, AgentStatus
            from tether.agent.events import AGENT_STATUS
            from tether.loop.hooks import REQUEST_ERROR, RequestError
            from tether.runtime import Context, Next
            from tether.shell.definition import SHELL, ShellExecutor


            def fine(ctx: Context) -> ShellExecutor:
                def on_status(agent: Agent, status: AgentStatus) -> None: ...

                async def on_error(
                    error: RequestError, next_: Next[RequestError], agent: Agent
                ) -> RequestError:
                    return await next_(error)

                ctx.on(AGENT_STATUS, on_status)
                ctx.on(REQUEST_ERROR, on_error)
                return ctx.service(SHELL)


            def wrong(ctx: Context) -> None:
                def one_argument(agent: Agent) -> None: ...

                ctx.on(AGENT_STATUS, one_argument)  # line 24
                ctx.emit(AGENT_STATUS, "not an agent", AgentStatus.IDLE)  # line 25
                ctx.on(REQUEST_ERROR, one_argument)  # line 26
                ctx.on(AGENT_STATSU, one_argument)  # line 27
                ctx.listen(AGENT_STATUS, one_argument)  # line 28
            """
        )
    )
    flags = ["--strict", "--no-incremental", "--follow-imports=silent", "--config-file=/dev/null"]
    out, _err, status = api.run([*flags, str(program)])
    errors = sorted({int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line})
    assert status == 1, out
    assert errors == [24, 25, 26, 27, 28], out
