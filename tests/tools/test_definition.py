"""Tool definitions: names, argument schemas, the decorator, and the value types."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import pytest
from msgspec import Meta
from pydantic import BaseModel, Field, RootModel

from tether.runtime import CancelSignal
from tether.runtime.schema import Schema
from tether.tools import Tool, ToolExec, ToolOutput, ToolResult, ToolSpec, tool

from .support import echo_tool, fake_agent


class Point(BaseModel):
    """A point on the grid."""

    x: int
    y: int


class DrawArgs(BaseModel):
    """Draw a shape."""

    shape: Literal["circle", "square"] = Field(description="What to draw.")
    at: Point
    label: str | None = None
    title: str = Field(default="", title="Caption")


async def draw(args: DrawArgs, exec: ToolExec) -> str:
    return args.shape


@pytest.mark.parametrize("name", ["a", "bash", "read_file", "web-fetch", "A1", "x" * 64])
def test_valid_tool_names_are_accepted(name: str) -> None:
    assert echo_tool(name).name == name


@pytest.mark.parametrize("name", ["", "1abc", "_x", "-x", "has space", "dot.ted", "é", "x" * 65])
def test_invalid_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        echo_tool(name)


def test_the_schema_is_a_json_schema_object_without_derived_titles() -> None:
    schema = Tool("draw", "Draw.", DrawArgs, draw).parameters

    assert schema["type"] == "object"
    assert schema["required"] == ["shape", "at"]
    assert schema["description"] == "Draw a shape."
    assert schema["properties"]["shape"] == {
        "description": "What to draw.",
        "enum": ["circle", "square"],
        "type": "string",
    }
    # A nested model is a reference into $defs, and the reference resolves.
    reference = schema["properties"]["at"]["$ref"]
    assert reference == "#/$defs/Point"
    assert schema["$defs"]["Point"]["type"] == "object"
    # Titles pydantic derives (from the class, from field names) are noise; a
    # title the author chose stays, and a property named "title" is untouched.
    assert "title" not in schema
    assert "title" not in schema["properties"]["label"]
    assert schema["properties"]["title"]["title"] == "Caption"
    assert json.loads(json.dumps(schema)) == schema


class MoveArgs(Schema, frozen=True):
    direction: Annotated[Literal["up", "down"], Meta(description="where to go")]
    steps: Annotated[int, Meta(ge=1)] = 1


def test_a_schema_model_gives_its_schema_and_works_with_the_decorator() -> None:
    @tool()
    async def move(args: MoveArgs, exec: ToolExec) -> str:
        """Move the cursor."""
        return args.direction

    assert move.args is MoveArgs
    assert move.parameters == {
        "type": "object",
        "properties": {
            "direction": {"enum": ["down", "up"], "description": "where to go"},
            "steps": {"type": "integer", "minimum": 1, "default": 1},
        },
        "required": ["direction"],
        "additionalProperties": False,
    }


def test_arguments_that_are_not_a_json_object_are_rejected() -> None:
    async def total(args: RootModel[list[int]], exec: ToolExec) -> str:
        return str(sum(args.root))

    with pytest.raises(ValueError, match="must be a JSON object"):
        Tool("total", "Sum.", RootModel[list[int]], total)


def test_a_tool_checks_the_types_of_its_parts() -> None:
    with pytest.raises(TypeError, match="a Schema or a pydantic model"):
        Tool("t", "d", dict, draw)  # type: ignore[arg-type, type-var]
    with pytest.raises(TypeError, match="description must be str"):
        Tool("t", None, DrawArgs, draw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="concurrency_safe must be bool"):
        Tool("t", "d", DrawArgs, draw, concurrency_safe=1)  # type: ignore[arg-type]


def test_the_decorator_reads_name_description_and_args_from_the_function() -> None:
    @tool(concurrency_safe=True)
    async def draw_shape(args: DrawArgs, exec: ToolExec) -> str:
        """Draw a shape on the grid.

        Shapes are drawn in the order they are asked for.
        """
        return args.shape

    assert draw_shape.name == "draw_shape"
    assert draw_shape.description == (
        "Draw a shape on the grid.\n\nShapes are drawn in the order they are asked for."
    )
    assert draw_shape.args is DrawArgs
    assert draw_shape.concurrency_safe is True


def test_the_decorator_takes_explicit_parts_over_inferred_ones() -> None:
    @tool(name="paint", description="Paint.", args=DrawArgs)
    async def anything(args: Any, exec: ToolExec) -> str:
        return "ok"

    assert (anything.name, anything.description, anything.args) == ("paint", "Paint.", DrawArgs)


def test_the_decorator_needs_a_model_annotation_or_explicit_args() -> None:
    with pytest.raises(TypeError, match="pass args="):

        @tool()
        async def untyped(args, exec):  # type: ignore[no-untyped-def]
            return ""

    def local_model_tool() -> None:
        class Local(BaseModel):
            value: int

        # With postponed annotations, "Local" cannot be resolved from the
        # module's globals.
        @tool()
        async def uses_local(args: Local, exec: ToolExec) -> str:
            return ""

    with pytest.raises(TypeError, match="cannot resolve"):
        local_model_tool()


def test_parameters_and_specs_are_private_copies() -> None:
    echo = echo_tool()
    spec = echo.spec()
    spec.parameters["properties"]["text"]["type"] = "integer"  # type: ignore[index]
    echo.parameters["required"].append("other")
    assert echo.spec() == ToolSpec("echo", "Echo.", echo.parameters)
    assert echo.parameters["properties"]["text"] == {"type": "string"}
    assert echo.parameters["required"] == ["text"]
    assert hash(spec) == hash(echo.spec())


def test_schema_is_the_tools_own_schema_shared_by_every_read() -> None:
    echo = echo_tool()
    assert echo.schema is echo.schema
    assert echo.schema == echo.parameters
    assert echo.parameters is not echo.schema


def test_tool_values_are_frozen_and_check_their_fields() -> None:
    result = ToolResult("c1", "echo", "hi", False)
    with pytest.raises(AttributeError):
        result.content = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"ToolResult\.is_error must be bool"):
        ToolResult("c1", "echo", "hi", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ToolOutput\.content must be str"):
        ToolOutput(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ToolExec\.signal must be a CancelSignal"):
        ToolExec(None, "c1", None, None)  # type: ignore[arg-type]
    assert ToolOutput("ok") == ToolOutput("ok", is_error=False)


def test_exec_for_a_call_takes_the_cwd_of_the_agent_session() -> None:
    signal = CancelSignal()
    agent = fake_agent("agent-1", cwd="/projects/demo")
    with_agent = ToolExec.for_call("c1", signal, agent)
    without = ToolExec.for_call("c2", signal)
    assert (with_agent.agent, with_agent.cwd, with_agent.signal) == (
        agent,
        "/projects/demo",
        signal,
    )
    assert (without.agent, without.cwd) == (None, None)


def test_a_flat_model_gives_a_flat_schema() -> None:
    assert echo_tool().parameters == {
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "type": "object",
    }


@pytest.mark.parametrize(
    ("kind", "idempotent", "rerunnable"),
    [
        ("read", False, True),
        ("search", False, True),
        ("think", False, True),
        ("edit", False, False),
        ("execute", False, False),
        ("fetch", False, False),
        ("other", False, False),
        ("execute", True, True),
    ],
)
def test_a_tool_may_run_again_only_when_it_changes_nothing_or_declares_itself_idempotent(
    kind: Any, idempotent: bool, rerunnable: bool
) -> None:
    from msgspec.structs import replace

    from tether.tools.presentation import ToolShown

    shown = replace(echo_tool(), shown=ToolShown(kind=kind), idempotent=idempotent)
    assert shown.rerunnable is rerunnable


def test_an_idempotency_key_names_the_session_and_the_call() -> None:
    assert ToolExec.for_call("c9", CancelSignal(), fake_agent("s1")).idempotency_key == "s1/c9"
    assert ToolExec.for_call("c9", CancelSignal()).idempotency_key == "c9"
