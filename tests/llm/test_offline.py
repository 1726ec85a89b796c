"""The built-in offline provider: a scripted model (tether.llm.offline)."""

from __future__ import annotations

import tracemalloc
from contextlib import aclosing

import pytest

import tether.llm.offline
import tether.llm.service
from tether.llm import (
    AssistantMessage,
    Finish,
    LlmView,
    ModelRequest,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolMessage,
    ToolSpec,
    Usage,
    UserRoleMessage,
    assemble,
)
from tether.llm.assemble import Assembled, Assembler
from tether.llm.offline import OfflineModel
from tether.llm.service import LLM
from tether.runtime import CancelSignal, PluginConfigError, Runtime

from .fakes import collect

BASH = ToolSpec("bash", "Run a shell command.", {"type": "object"})


def user(text: str) -> UserRoleMessage:
    return UserRoleMessage((TextBlock(text),))


def request(
    *messages: UserRoleMessage | AssistantMessage | ToolMessage, tools: bool = True
) -> ModelRequest:
    return ModelRequest("offline", messages, tools=(BASH,) if tools else ())


@pytest.fixture
async def llm(runtime: Runtime) -> LlmView:
    await runtime.ctx.plugin(tether.llm.service)
    await runtime.ctx.plugin(tether.llm.offline, {"chunk_size": 8})
    view = runtime.ctx.get(LLM)
    assert isinstance(view, LlmView)
    return view


async def answer(llm: LlmView, model_request: ModelRequest) -> Assembled:
    return assemble(await collect(llm.stream(model_request, CancelSignal())))


async def test_the_plugin_registers_the_offline_provider(llm: LlmView) -> None:
    assert llm.providers() == ["offline"]


async def test_dollar_prompt_calls_bash_with_the_command(llm: LlmView) -> None:
    result = await answer(llm, request(user("$ echo hi")))

    assert result.finish == Finish("tool-calls")
    (call,) = result.message.tool_calls
    assert call.name == "bash"
    assert call.arguments == {"command": "echo hi"}
    assert result.invalid_calls == {}


async def test_ampersand_prompt_calls_bash_in_the_background(llm: LlmView) -> None:
    result = await answer(llm, request(user("& sleep 1")))

    (call,) = result.message.tool_calls
    assert call.arguments == {"command": "sleep 1", "run_in_background": True}


async def test_call_ids_differ_from_step_to_step(llm: LlmView) -> None:
    first = await answer(llm, request(user("$ ls")))
    (call,) = first.message.tool_calls
    done = ToolMessage(call.id, "bash", "a.txt", is_error=False)
    second = await answer(
        llm, request(user("$ ls"), first.message, done, AssistantMessage(()), user("$ pwd"))
    )
    assert second.message.tool_calls[0].id != call.id


async def test_a_shell_prompt_without_the_bash_tool_gets_an_explanation(llm: LlmView) -> None:
    result = await answer(llm, request(user("$ echo hi"), tools=False))

    assert result.finish == Finish("stop")
    assert result.message.tool_calls == ()
    assert "bash tool is not available" in result.text
    assert "echo hi" in result.text


async def test_tool_result_is_answered_with_a_summary(llm: LlmView) -> None:
    output = "\n".join(f"line {n}" for n in range(1, 21)) + "\n[exit code: 2]"
    result = await answer(
        llm,
        request(
            user("$ seq"),
            AssistantMessage((ToolCallBlock("c0", "bash", {"command": "seq"}),)),
            ToolMessage("c0", "bash", output, is_error=True),
        ),
    )

    assert result.finish == Finish("stop")
    assert result.message.tool_calls == ()
    assert result.text.startswith("The bash call failed:\nline 1\n")
    assert "line 5" in result.text
    assert "line 6" not in result.text
    assert "16 more lines" in result.text
    assert "(exit code 2)" in result.text


async def test_a_long_tool_result_is_cut_to_a_few_hundred_characters(llm: LlmView) -> None:
    result = await answer(
        llm, request(user("$ yes"), ToolMessage("c0", "bash", "y" * 5000, is_error=False))
    )
    assert result.text.startswith("The bash call finished:\nyyy")
    assert len(result.text) < 400


async def test_a_plain_prompt_gets_a_deterministic_reply_on_configuring_a_model(
    llm: LlmView,
) -> None:
    first = await answer(llm, request(user("what is the capital of France?")))
    second = await answer(llm, request(user("what is the capital of France?")))

    assert first.message == second.message
    assert first.finish == Finish("stop")
    assert "what is the capital of France?" in first.text
    assert "not an LLM" in first.text
    assert "--model deepseek:deepseek-chat" in first.text
    assert "DEEPSEEK_API_KEY" in first.text


async def test_the_answer_streams_in_small_chunks_with_usage(llm: LlmView) -> None:
    chunks = await collect(llm.stream(request(user("hello there")), CancelSignal()))

    texts = [chunk.text for chunk in chunks if isinstance(chunk, TextDelta)]
    assert len(texts) > 1
    assert all(len(text) <= 8 for text in texts)
    usage = [chunk for chunk in chunks if isinstance(chunk, Usage)]
    assert usage == [Usage(input_tokens=2, output_tokens=len("".join(texts).split()))]
    assert chunks[-1] == Finish("stop")


async def test_a_long_prompt_is_echoed_and_counted_without_a_string_per_word() -> None:
    # A compaction asks with the whole transcript in one prompt: answering it
    # must not hold the prompt's words as objects.
    prompt = "one  two\tthree\n" + "word " * 200_000
    model = OfflineModel()
    tracemalloc.start()
    try:
        chunks = [chunk async for chunk in model.stream(request(user(prompt)), CancelSignal())]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    text = "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))
    echo = " ".join(prompt.split())[:200].rstrip() + " …"
    assert f'You said: "{echo}"' in text
    assert Usage(input_tokens=len(prompt.split()), output_tokens=len(text.split())) in chunks
    assert peak < 2 * len(prompt)


async def test_tool_arguments_stream_in_fragments_too(llm: LlmView) -> None:
    chunks = await collect(llm.stream(request(user("$ echo a long command")), CancelSignal()))

    calls = [chunk for chunk in chunks if isinstance(chunk, ToolCallDelta)]
    assert len(calls) > 1
    assert calls[0].id is not None
    assert calls[0].name == "bash"
    assert all(call.id is None and call.name is None for call in calls[1:])


async def test_cancel_stops_the_offline_stream(llm: LlmView) -> None:
    signal = CancelSignal()
    assembler = Assembler()

    async with aclosing(llm.stream(request(user("tell me a story")), signal)) as stream:
        first = await anext(stream)
        assembler.feed(first)
        signal.cancel("user")
        rest = [chunk async for chunk in stream]

    assert isinstance(first, TextDelta)
    assert rest == [Finish("aborted")]
    assert assembler.partial() == AssistantMessage((TextBlock(first.text),), interrupted=True)


async def test_the_adapter_itself_finishes_aborted_when_cancelled() -> None:
    signal = CancelSignal()
    chunks = []
    async for chunk in OfflineModel(chunk_size=4).stream(request(user("hello world")), signal):
        chunks.append(chunk)
        signal.cancel("user")
    assert chunks == [TextDelta(chunks[0].text), Finish("aborted")]  # type: ignore[union-attr]


async def test_chunk_size_must_be_positive(runtime: Runtime) -> None:
    await runtime.ctx.plugin(tether.llm.service)
    with pytest.raises(PluginConfigError, match="chunk_size"):
        runtime.ctx.plugin(tether.llm.offline, {"chunk_size": 0})
    with pytest.raises(PluginConfigError, match="chunk_sise"):
        runtime.ctx.plugin(tether.llm.offline, {"chunk_sise": 4})
    with pytest.raises(ValueError, match="chunk_size"):
        OfflineModel(chunk_size=0)


async def test_slash_tool_prompt_calls_the_named_tool_with_json_arguments(llm: LlmView) -> None:
    result = await answer(llm, request(user('/tool bash {"command": "ls", "timeout_ms": 5}')))
    (call,) = result.message.tool_calls
    assert (call.name, dict(call.arguments)) == ("bash", {"command": "ls", "timeout_ms": 5})


async def test_slash_tool_prompt_explains_unknown_tools_and_bad_json(llm: LlmView) -> None:
    unknown = await answer(llm, request(user("/tool nosuch {}")))
    assert "no tool 'nosuch'" in unknown.text and "bash" in unknown.text
    bad = await answer(llm, request(user("/tool bash {not json")))
    assert "not JSON" in bad.text and not bad.message.tool_calls


FILE_TOOLS = tuple(
    ToolSpec(name, f"The {name} tool.", {"type": "object"})
    for name in ("read", "write", "edit", "grep", "glob")
)


def file_request(*messages: UserRoleMessage | AssistantMessage | ToolMessage) -> ModelRequest:
    return ModelRequest("offline", messages, tools=FILE_TOOLS)


@pytest.mark.parametrize(
    ("prompt", "tool", "arguments"),
    [
        ("read src/a.py", "read", {"path": "src/a.py"}),
        (
            "write notes.txt: hello world",
            "write",
            {"path": "notes.txt", "content": "hello world\n"},
        ),
        ("grep def main", "grep", {"pattern": "def main", "output_mode": "content"}),
        (
            "grep TODO in src",
            "grep",
            {"pattern": "TODO", "output_mode": "content", "path": "src"},
        ),
        ("glob **/*.py", "glob", {"pattern": "**/*.py"}),
    ],
)
async def test_file_directives_call_the_file_tools(
    llm: LlmView, prompt: str, tool: str, arguments: dict[str, object]
) -> None:
    result = await answer(llm, file_request(user(prompt)))
    (call,) = result.message.tool_calls
    assert (call.name, dict(call.arguments)) == (tool, arguments)


async def test_an_edit_directive_reads_first_then_edits_then_summarizes(llm: LlmView) -> None:
    prompt = user("edit hello.txt: world => tether")
    first = await answer(llm, file_request(prompt))
    (read,) = first.message.tool_calls
    assert (read.name, dict(read.arguments)) == ("read", {"path": "hello.txt"})
    seen = ToolMessage(read.id, "read", "     1\thello world", is_error=False)
    second = await answer(llm, file_request(prompt, first.message, seen))
    (edit,) = second.message.tool_calls
    assert edit.name == "edit" and edit.id != read.id
    assert dict(edit.arguments) == {
        "path": "hello.txt",
        "old_string": "world",
        "new_string": "tether",
    }
    done = ToolMessage(edit.id, "edit", "edited hello.txt: 1 replacement", is_error=False)
    third = await answer(llm, file_request(prompt, first.message, seen, second.message, done))
    assert third.message.tool_calls == ()
    assert third.text.startswith("The edit call finished:")


async def test_an_edit_directive_stops_when_the_read_fails(llm: LlmView) -> None:
    prompt = user("edit gone.txt: a => b")
    first = await answer(llm, file_request(prompt))
    (read,) = first.message.tool_calls
    failed = ToolMessage(read.id, "read", "gone.txt does not exist", is_error=True)
    second = await answer(llm, file_request(prompt, first.message, failed))
    assert second.message.tool_calls == ()
    assert "gone.txt does not exist" in second.text


async def test_a_file_directive_without_its_tool_gets_an_explanation(llm: LlmView) -> None:
    result = await answer(llm, request(user("read a.txt")))
    assert result.message.tool_calls == ()
    assert "cannot call read" in result.text
