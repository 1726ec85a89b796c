"""A tool's argument model: a :class:`~tether.runtime.checked.Checked` dataclass or a
pydantic model.

The two forms behave alike for the model and for the tool: the JSON Schema
advertised to the model, the validation a call's arguments go through, and
the JSON form handed to ``tool/before-execute`` listeners. pydantic is
imported only where a pydantic model is involved, so the built-in tools
(``Checked`` arguments) do not make every command import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.runtime.checked import (
    Checked,
    FieldError,
    as_data,
    build,
    check_schema,
    describe_validation_error,
    is_pydantic_model,
    json_schema,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ArgumentsError", "arguments_data", "arguments_schema", "is_arguments_model", "parse"]


class ArgumentsError(ValueError):
    """The arguments of a call do not validate; the message locates each problem
    from ``arguments``."""


def is_arguments_model(cls: object) -> bool:
    """Whether ``cls`` can be a tool's argument model."""
    return (isinstance(cls, type) and issubclass(cls, Checked)) or is_pydantic_model(cls)


def arguments_schema(model: type[Any]) -> dict[str, Any]:
    """The JSON Schema of ``model``, without titles (the tool's name says it all).

    Raises:
        TypeError: ``model`` has a field no JSON Schema can describe.
    """
    if issubclass(model, Checked):
        check_schema(model)
        return json_schema(model)
    return _pydantic_schema(model)


def parse(model: type[Any], arguments: object) -> object:
    """``arguments`` (JSON-shaped) validated into an instance of ``model``.

    Raises:
        ArgumentsError: they do not validate.
    """
    if issubclass(model, Checked):
        if not isinstance(arguments, Mapping):
            raise ArgumentsError(f"arguments: must be an object, got {arguments!r}")
        try:
            return build(model, arguments)
        except FieldError as exc:
            raise ArgumentsError(exc.located("arguments")) from None
        except (TypeError, ValueError) as exc:  # a check of the tool's own __post_init__
            raise ArgumentsError(f"arguments: {exc}") from None
    from pydantic import ValidationError

    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise ArgumentsError(describe_validation_error(exc, root="arguments")) from None


def arguments_data(value: object) -> Mapping[str, object]:
    """Validated arguments as JSON-shaped data.

    Raises:
        Exception: whatever a pydantic model's serialization raises.
    """
    if isinstance(value, Checked):
        data = as_data(value)
    else:
        data = value.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
    assert isinstance(data, dict)
    return data


def _pydantic_schema(model: type[BaseModel]) -> dict[str, Any]:
    from pydantic.json_schema import GenerateJsonSchema

    class Untitled(GenerateJsonSchema):
        """Leaves out the titles pydantic derives from field names.

        They repeat the property names in every tool definition the model
        reads; titles an author set explicitly are kept.
        """

        def field_title_should_be_set(self, schema: object) -> bool:
            return False

    schema = model.model_json_schema(schema_generator=Untitled)
    # The class name says nothing the tool's own name and description do not.
    schema.pop("title", None)
    return schema
