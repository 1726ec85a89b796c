"""What an error result tells the model to do next: the call to make instead.

A small model that gets a refusal it cannot act on gives up, or invents a
result. The pipeline's own refusals (an unknown tool, arguments that do not
validate) therefore end with the call that would work, in the terms the
model calls in: exact tool and parameter names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["nearest", "parameters"]


def nearest(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name`` most likely misspells (case, a typo, a
    prefix such as ``functions.``), or ``None`` when none is close."""
    known = list(names)
    by_case = {candidate.lower(): candidate for candidate in known}
    bare = name.rpartition(".")[2].strip().lower()
    if bare in by_case:
        return by_case[bare]
    close = difflib.get_close_matches(bare, list(by_case), n=1, cutoff=0.75)
    return by_case[close[0]] if close else None


def parameters(schema: Mapping[str, Any]) -> str:
    """A tool's parameters as a call needs them, from its JSON Schema:
    ``path (string, required), offset (integer)``; ``(none)`` when it takes none."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "(none)"
    required = set(schema.get("required", ()))
    shown = []
    for field, spec in properties.items():
        kind = _kind(spec) if isinstance(spec, Mapping) else "any"
        shown.append(f"{field} ({kind}, required)" if field in required else f"{field} ({kind})")
    return ", ".join(shown)


def _kind(spec: Mapping[str, Any]) -> str:
    """The JSON type a parameter's schema asks for (its values, for an enum); ``null``
    is left out: leaving the parameter out says the same."""
    if "enum" in spec:
        return "one of " + "/".join(str(value) for value in spec["enum"])
    if "type" in spec:
        kind = spec["type"]
        return kind if isinstance(kind, str) else "/".join(k for k in kind if k != "null")
    for key in ("anyOf", "oneOf"):
        options = spec.get(key)
        if isinstance(options, list):
            kinds = [
                _kind(o) for o in options if isinstance(o, Mapping) and o.get("type") != "null"
            ]
            return "/".join(dict.fromkeys(kinds)) or "null"
    return "any"
