"""A tool's argument model: a :class:`~tether.runtime.schema.Schema` or a pydantic model.

The two forms behave alike for the model and for the tool: the JSON Schema
advertised to the model, the validation a call's arguments go through, and
the JSON form handed to ``tool/before-execute`` listeners. All three come
from :mod:`tether.runtime.schema`; this module words them for a tool call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.runtime.schema import SchemaError, check_model, decode, json_schema, to_data

__all__ = ["ArgumentsError", "arguments_data", "arguments_schema", "parse"]


class ArgumentsError(ValueError):
    """The arguments of a call do not validate; the message locates each problem
    from ``arguments``."""


def arguments_schema(model: type[Any]) -> dict[str, Any]:
    """The JSON Schema of ``model``, without titles (the tool's name says it all).

    Raises:
        TypeError: ``model`` has a field no JSON Schema can describe.
    """
    check_model(model)
    return json_schema(model)


def parse(model: type[Any], arguments: object) -> object:
    """``arguments`` (JSON-shaped) validated into an instance of ``model``.

    Raises:
        ArgumentsError: they do not validate.
    """
    try:
        return decode(model, arguments, root="arguments")
    except SchemaError as exc:
        raise ArgumentsError(str(exc)) from None


def arguments_data(value: object) -> Mapping[str, object]:
    """Validated arguments as JSON-shaped data.

    Raises:
        Exception: whatever a pydantic model's serialization raises.
    """
    data = to_data(value)
    assert isinstance(data, dict)
    return data
