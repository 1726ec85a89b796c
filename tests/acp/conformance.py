"""Frames checked against an official ACP JSON schema (one per protocol version).

A frame is checked twice: as a whole against the schema's root (a JSON-RPC message of
either side), and its params, result or error against the definition the schema names
for that method (``x-method``): a request's ``…Request``, a notification's
``…Notification``, an answer's ``…Response`` (found from the id of the request it
answers) or ``Error``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "acp"


class SchemaCheck:
    """The checks of one schema file (``schemas/acp/…``), validators built once."""

    def __init__(self, path: Path) -> None:
        self.schema: dict[str, Any] = json.loads(path.read_text())
        self.defs: dict[str, Any] = self.schema["$defs"]
        self._root = Draft202012Validator(self.schema)
        self._validators: dict[str, Draft202012Validator] = {}

    def _validator(self, name: str) -> Draft202012Validator:
        if name not in self._validators:
            self._validators[name] = Draft202012Validator(
                {"$defs": self.defs, "$ref": f"#/$defs/{name}"}
            )
        return self._validators[name]

    def definition(self, method: str, suffix: str) -> str:
        """The schema's definition for ``method`` whose name ends with ``suffix``."""
        names = [
            n for n, d in self.defs.items() if d.get("x-method") == method and n.endswith(suffix)
        ]
        assert len(names) == 1, f"the schema has no single {suffix} for {method}: {names}"
        return names[0]

    def problems(self, frame: dict[str, Any], asked: dict[object, str]) -> list[str]:
        """What is wrong with ``frame`` (a frame the server sent) by the schema;
        ``asked`` names the method of each request id the client sent."""
        if "method" in frame:
            name = self.definition(frame["method"], "Request" if "id" in frame else "Notification")
            part = frame.get("params")
        elif "result" in frame:
            name = self.definition(asked[frame["id"]], "Response")
            part = frame["result"]
        else:
            name, part = "Error", frame.get("error")
        errors = [
            f"{name}: {e.message} at {list(e.absolute_path)}"
            for e in self._validator(name).iter_errors(part)
        ]
        return errors + [f"message: {e.message}" for e in self._root.iter_errors(frame)]


V1 = SchemaCheck(SCHEMAS / "schema.unstable.json")
"""Protocol version 1, unstable methods included (what tether speaks by default)."""

V2 = SchemaCheck(SCHEMAS / "v2" / "schema.json")
"""The protocol version 2 draft."""
