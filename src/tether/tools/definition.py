"""What a tool is: a name, a description, an argument model and an async function.

A tool's arguments are a :class:`~tether.runtime.schema.Schema` or a
pydantic model (see
:mod:`tether.tools.arguments`). Its JSON Schema is what the model sees, and
validation against the model is what the arguments of a call go through
before the tool runs, so a tool's function only ever receives a valid
instance of its own argument model.

Define a tool with the :func:`tool` decorator, which takes the name from the
function, the description from its docstring and the argument model from the
annotation of its first parameter::

    class ReadArgs(BaseModel):
        path: str = Field(description="File to read, relative to the session's cwd.")

    @tool(concurrency_safe=True)
    async def read(args: ReadArgs, exec: ToolExec) -> str:
        \"\"\"Read a text file.\"\"\"
        return Path(exec.cwd or ".", args.path).read_text()

or build a :class:`Tool` directly when the parts come from elsewhere.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from tether.content import ImageRef, ToolSpec
from tether.runtime.schema import copy_json, is_model, shared_json_schema
from tether.runtime.signal import CancelSignal
from tether.tools.arguments import arguments_schema
from tether.tools.presentation import DEFAULT_SHOWN, NO_EFFECT_KINDS, ToolShown
from tether.tools.preview import ToolPreview

if TYPE_CHECKING:
    from tether.agent.types import Agent

__all__ = [
    "Tool",
    "ToolExec",
    "ToolFunction",
    "ToolOutput",
    "ToolPreviewer",
    "ToolResult",
    "ToolSpec",
    "tool",
]

A = TypeVar("A")

_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")


class ToolExec(msgspec.Struct, frozen=True):
    """The circumstances of one tool call, handed to the tool with its arguments.

    ``agent`` is the agent whose model made the call, or ``None`` when a
    program calls the tool directly. ``signal`` is cancelled when the call
    should stop; tools are cooperative and decide themselves how to honour it
    (see :class:`~tether.runtime.signal.CancelSignal`). ``cwd`` is the working
    directory the call should act in: the agent session's cwd when there is an
    agent (see :meth:`for_call`). ``approved`` is set by a permission policy
    (a ``tool/before-execute`` listener) once a person allowed this very call;
    a tool may then do what it refuses unasked (see
    :attr:`~tether.tools.preview.ToolPreview.approval`), or once a permission
    rule allowed it. ``asked_by`` names the permission rules that put the call
    to a person whatever the session's mode and grants (it is asked every
    time, and "always" is not offered). ``model`` is the
    reference of the model whose answer made the call (``None`` when no
    model did), so a tool can shape its output for it (``read`` returns an
    image only to a model that accepts images).
    """

    agent: Agent | None
    call_id: str
    signal: CancelSignal
    cwd: str | None
    approved: bool = False
    model: str | None = None
    asked_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.call_id, str):
            raise TypeError(f"ToolExec.call_id must be str, got {self.call_id!r}")
        if not isinstance(self.signal, CancelSignal):
            raise TypeError(f"ToolExec.signal must be a CancelSignal, got {self.signal!r}")
        if not isinstance(self.cwd, str | None):
            raise TypeError(f"ToolExec.cwd must be str or None, got {self.cwd!r}")
        if not isinstance(self.approved, bool):
            raise TypeError(f"ToolExec.approved must be bool, got {self.approved!r}")
        if not isinstance(self.model, str | None):
            raise TypeError(f"ToolExec.model must be str or None, got {self.model!r}")
        if not isinstance(self.asked_by, tuple):
            raise TypeError(f"ToolExec.asked_by must be a tuple, got {self.asked_by!r}")

    @property
    def idempotency_key(self) -> str:
        """A key naming this call and no other, the same on every host that runs or
        repairs it (``<session id>/<call id>``; the call id alone without an agent).

        It is logged in the call's started record (``tool/call``); a tool that
        changes an outside system may pass it along (an ``Idempotency-Key``
        header, a unique column) so that system can refuse a second attempt.
        """
        return self.call_id if self.agent is None else f"{self.agent.id}/{self.call_id}"

    @classmethod
    def for_call(cls, call_id: str, signal: CancelSignal, agent: Agent | None = None) -> ToolExec:
        """The exec of call ``call_id``, with ``cwd`` taken from ``agent``'s session."""
        cwd = agent.session.header.cwd if agent is not None else None
        return cls(agent=agent, call_id=call_id, signal=signal, cwd=cwd)


class ToolOutput(msgspec.Struct, frozen=True):
    """What a tool returns: text for the model, flagged as an error or not,
    and images beside the text.

    A tool may return a plain ``str`` instead; it means ``ToolOutput(text)``.
    Returning ``is_error=True`` is how a tool reports a failure it understood
    (a missing file, a non-zero exit); raising is for the unexpected.
    ``images`` reach the model with the text; return them only when
    :attr:`ToolExec.model` accepts images.
    """

    content: str
    is_error: bool = False
    images: tuple[ImageRef, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise TypeError(f"ToolOutput.content must be str, got {self.content!r}")
        if not isinstance(self.is_error, bool):
            raise TypeError(f"ToolOutput.is_error must be bool, got {self.is_error!r}")
        _check_images("ToolOutput", self.images)


class ToolResult(msgspec.Struct, frozen=True):
    """The outcome of one tool call, answering the call with id ``call_id``.

    Every call yields exactly one result, whether the tool ran, failed, was
    unknown, got invalid arguments, was denied or was cancelled; ``is_error``
    tells the model which. ``images`` are the images the tool returned.
    """

    call_id: str
    name: str
    content: str
    is_error: bool
    images: tuple[ImageRef, ...] = ()

    def __post_init__(self) -> None:
        for name, kind in (("call_id", str), ("name", str), ("content", str), ("is_error", bool)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"ToolResult.{name} must be {kind.__name__}, got {value!r}")
        _check_images("ToolResult", self.images)


def _check_images(owner: str, images: object) -> None:
    if type(images) is not tuple or (images and not all(isinstance(i, ImageRef) for i in images)):
        raise TypeError(f"{owner}.images must be a tuple of ImageRef, got {images!r}")


ToolFunction = Callable[[A, ToolExec], Awaitable[ToolOutput | str]]
"""The body of a tool: ``async def run(args, exec) -> ToolOutput | str``."""

ToolPreviewer = Callable[[A, ToolExec], Awaitable[ToolPreview]]
"""How a tool describes a call before it runs (see :mod:`tether.tools.preview`)."""


class Tool(msgspec.Struct, Generic[A], frozen=True, eq=False):
    """A tool the model can call.

    ``name`` matches ``^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`` (what model providers
    accept). ``args`` is the model of the arguments (a ``Schema`` or a
    pydantic model): its JSON Schema is advertised to the model and a call's
    arguments are validated against it before ``execute`` runs. A ``Schema``
    rejects unknown argument names; for a pydantic model that is its choice
    (``model_config = ConfigDict(extra="forbid")``).

    ``concurrency_safe`` tools may run in parallel with other safe tools of the
    same batch of calls; every other tool runs alone.

    ``idempotent`` says that running a call twice has the effect of running it
    once. With a read-only :attr:`shown` kind it makes the tool
    :attr:`rerunnable`; a call of any other tool is logged as started
    durably before it runs, and one a crash cut off is reported to the model
    as of unknown outcome, never run again by tether.

    ``preview``, when given, describes a call before it runs (its kind, the
    files it touches, the diff it would apply) and changes nothing; a
    frontend shows it, and a permission request carries it.

    ``shown`` is how every front end shows the tool's calls (its kind, the
    arguments naming files, the arguments shown as a change, its title; see
    :mod:`tether.tools.presentation`); it may name only arguments ``args``
    has.

    Tools compare by identity: two tools with equal fields are still two
    registrations.

    Raises:
        ValueError: ``name`` is not a valid tool name, ``args`` does not
            describe a JSON object, or ``shown`` names an argument ``args``
            does not have.
        TypeError: a field has the wrong type, or no JSON Schema can be built
            for ``args``.
    """

    name: str
    description: str
    args: type[A]
    execute: ToolFunction[A]
    concurrency_safe: bool = False
    preview: ToolPreviewer[A] | None = None
    shown: ToolShown = DEFAULT_SHOWN
    idempotent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"invalid tool name {self.name!r}: use a letter followed by up to 63 "
                "letters, digits, '_' or '-'"
            )
        if not isinstance(self.description, str):
            raise TypeError(f"tool {self.name!r}: description must be str")
        if not is_model(self.args):
            raise TypeError(f"tool {self.name!r}: args must be a Schema or a pydantic model")
        if not callable(self.execute):
            raise TypeError(f"tool {self.name!r}: execute must be an async function")
        if not isinstance(self.concurrency_safe, bool):
            raise TypeError(f"tool {self.name!r}: concurrency_safe must be bool")
        if self.preview is not None and not callable(self.preview):
            raise TypeError(f"tool {self.name!r}: preview must be an async function")
        if not isinstance(self.shown, ToolShown):
            raise TypeError(f"tool {self.name!r}: shown must be a ToolShown")
        if not isinstance(self.idempotent, bool):
            raise TypeError(f"tool {self.name!r}: idempotent must be bool")
        _check_object_schema(self.name, self.args)
        _check_shown(self.name, self.shown, self.schema)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments; a fresh copy on every read."""
        copied: dict[str, Any] = copy_json(self.schema)
        return copied

    @property
    def schema(self) -> Mapping[str, Any]:
        """The JSON Schema of the arguments, shared by every read: read it, never change it.

        What a model request carries on every turn (copying it each time
        cost more than encoding it); :attr:`parameters` is a copy to change.
        It is the one kept for the class of ``args`` (built when the tool
        was defined), so tools with the same ``args`` share it.
        """
        return shared_json_schema(self.args)

    @property
    def rerunnable(self) -> bool:
        """Whether running a call again is safe: the tool is :attr:`idempotent`, or its
        kind (:attr:`ToolShown.kind`) is one that changes nothing (:data:`NO_EFFECT_KINDS`)."""
        return self.idempotent or self.shown.kind in NO_EFFECT_KINDS

    def spec(self) -> ToolSpec:
        """How the model is told about this tool."""
        return ToolSpec(self.name, self.description, self.parameters)


def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[A] | None = None,
    concurrency_safe: bool = False,
    shown: ToolShown = DEFAULT_SHOWN,
    idempotent: bool = False,
) -> Callable[[ToolFunction[A]], Tool[A]]:
    """Decorate ``async def fn(args, exec)`` to make it a :class:`Tool`.

    ``name`` defaults to the function's name, ``description`` to its cleaned
    docstring, and ``args`` to the annotation of its first parameter (pass it
    explicitly when the annotation cannot be resolved at decoration time, for
    example a model defined inside a function of a module with postponed
    annotations).

    Raises:
        TypeError: ``args`` is omitted and cannot be read from the annotation;
            or as :class:`Tool` does.
        ValueError: as :class:`Tool` does.
    """

    def decorate(fn: ToolFunction[A]) -> Tool[A]:
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        return Tool(
            name=tool_name,
            description=description if description is not None else inspect.getdoc(fn) or "",
            args=args if args is not None else _args_annotation(fn, tool_name),
            execute=fn,
            concurrency_safe=concurrency_safe,
            shown=shown,
            idempotent=idempotent,
        )

    return decorate


def _args_annotation(fn: Callable[..., object], tool_name: str) -> type[Any]:
    parameters = list(inspect.signature(fn).parameters)
    if not parameters:
        raise TypeError(f"tool {tool_name!r}: its function must take (args, exec)")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise TypeError(
            f"tool {tool_name!r}: cannot resolve the annotation of {parameters[0]!r} ({exc}); "
            "pass args= to @tool"
        ) from None
    annotation = hints.get(parameters[0])
    if not isinstance(annotation, type) or not is_model(annotation):
        raise TypeError(
            f"tool {tool_name!r}: annotate {parameters[0]!r} with a Schema or a pydantic "
            "model, or pass args= to @tool"
        )
    return annotation


def _check_object_schema(tool_name: str, args: type[Any]) -> None:
    try:
        schema = arguments_schema(args)
    except Exception as exc:
        raise TypeError(
            f"tool {tool_name!r}: cannot build a JSON Schema for {args.__name__}: {exc}"
        ) from exc
    if schema.get("type") != "object":
        raise ValueError(
            f"tool {tool_name!r}: the arguments of a tool must be a JSON object, "
            f"but {args.__name__} describes {schema.get('type', 'something else')!r}"
        )


def _check_shown(tool_name: str, shown: ToolShown, schema: Mapping[str, Any]) -> None:
    properties = schema.get("properties")
    taken = set(properties) if isinstance(properties, Mapping) else set()
    unknown = sorted(shown.arguments() - taken)
    if unknown:
        raise ValueError(
            f"tool {tool_name!r}: its presentation names {', '.join(map(repr, unknown))}, "
            "which its arguments do not have"
        )
