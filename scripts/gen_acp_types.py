#!/usr/bin/env python3
"""Generate the ACP wire types, one module per protocol version, from the official JSON schemas.

Usage::

    python scripts/gen_acp_types.py            # write every module of TARGETS
    python scripts/gen_acp_types.py --check    # exit 1 if one differs from a fresh run

Each :class:`Target` is one protocol version: ``src/tether/acp/wire.py`` from
``schemas/acp/schema.unstable.json`` (see ``schemas/acp/SOURCE.md``: protocol version 1 as
the official packages ship it, unstable methods (``session/fork``, …) included), and
``src/tether/acp/v2/wire.py`` from ``schemas/acp/v2/schema.json`` (the version 2 draft, see
``schemas/acp/v2/README.md``). Only the types reachable from a target's roots are
generated: the messages tether receives, answers and sends in that version. The method
tables (``AGENT_METHODS``, ``CLIENT_METHODS``) are read from
the schema too: each request and notification names its method (``x-method``) and the
side that handles it (``x-side``).

How the schema maps to msgspec:

* an object definition is a ``Struct`` (``kw_only``, ``omit_defaults``): required
  properties have no default, the others default to ``None`` and are left out of the
  encoded frame when unset; each field keeps its wire name (``sessionId``) through
  ``msgspec.field(name=...)`` and is spelt in snake case in Python (``_meta`` is
  ``field_meta``);
* a ``oneOf``/``anyOf`` whose object variants all carry a constant discriminator is a
  tagged union: each variant is a ``Struct`` subclass of the variant's definition with
  ``tag_field``/``tag`` set, named ``<Tag><Union>`` (``TextContentBlock``);
* a union of string constants is a ``Literal`` (plain ``str`` when the schema leaves it
  open with an ``other`` string); a union msgspec cannot decode unambiguously (untagged
  objects, open variants, arrays of different items) is the raw JSON value it holds
  (``dict[str, object]``, ``list[object]`` or ``object``);
* an object with properties *and* variants (``SetSessionConfigOptionRequest``) gets
  every variant's properties as optional fields, those of the variants' own variants
  included (``CreateElicitationRequest``: a mode, then a scope).

Nothing here is specific to one definition: each rule reads only the schema.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

V1_ROOTS = (
    # What a client sends tether.
    "InitializeRequest",
    "AuthenticateRequest",
    "LogoutRequest",
    "NewSessionRequest",
    "LoadSessionRequest",
    "ResumeSessionRequest",
    "ForkSessionRequest",
    "CloseSessionRequest",
    "DeleteSessionRequest",
    "ListSessionsRequest",
    "SetSessionModeRequest",
    "SetSessionConfigOptionRequest",
    "PromptRequest",
    "CancelNotification",
    "CancelRequestNotification",
    # What tether answers.
    "InitializeResponse",
    "AuthenticateResponse",
    "LogoutResponse",
    "NewSessionResponse",
    "LoadSessionResponse",
    "ResumeSessionResponse",
    "ForkSessionResponse",
    "CloseSessionResponse",
    "DeleteSessionResponse",
    "ListSessionsResponse",
    "SetSessionModeResponse",
    "SetSessionConfigOptionResponse",
    "PromptResponse",
    "Error",
    # What tether sends a client, and the answers it reads.
    "SessionNotification",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "ReadTextFileRequest",
    "ReadTextFileResponse",
    "WriteTextFileRequest",
    "WriteTextFileResponse",
    "CreateTerminalRequest",
    "CreateTerminalResponse",
    "TerminalOutputRequest",
    "TerminalOutputResponse",
    "WaitForTerminalExitRequest",
    "WaitForTerminalExitResponse",
    "KillTerminalRequest",
    "KillTerminalResponse",
    "ReleaseTerminalRequest",
    "ReleaseTerminalResponse",
    "CreateElicitationRequest",
    "CreateElicitationResponse",
)

V2_ROOTS = (
    # What a client sends tether.
    "InitializeRequest",
    "NewSessionRequest",
    "ResumeSessionRequest",
    "CloseSessionRequest",
    "DeleteSessionRequest",
    "ListSessionsRequest",
    "SetSessionConfigOptionRequest",
    "PromptRequest",
    "CancelSessionNotification",
    "CancelRequestNotification",
    # What tether answers.
    "InitializeResponse",
    "NewSessionResponse",
    "ResumeSessionResponse",
    "CloseSessionResponse",
    "DeleteSessionResponse",
    "ListSessionsResponse",
    "SetSessionConfigOptionResponse",
    "PromptResponse",
    "Error",
    # What tether sends a client, and the answers it reads.
    "UpdateSessionNotification",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
)


@dataclass(frozen=True)
class Target:
    """One generated module: the wire types of one protocol version."""

    schema: str
    """The schema file, relative to the repository."""
    output: str
    """The module written, relative to the repository."""
    version: int
    """The protocol version of :attr:`schema` (the schema files do not state it: the
    package that ships them keeps each version in its own directory, ``schema/v1``)."""
    roots: tuple[str, ...]


TARGETS = (
    Target("schemas/acp/schema.unstable.json", "src/tether/acp/wire.py", 1, V1_ROOTS),
    Target("schemas/acp/v2/schema.json", "src/tether/acp/v2/wire.py", 2, V2_ROOTS),
)

RAW_OBJECT = "dict[str, object]"
RAW_ARRAY = "list[object]"
RAW = "object"

Schema = Mapping[str, Any]


def pascal(text: str) -> str:
    """``resource_link`` → ``ResourceLink``; ``searchAndReplace`` → ``SearchAndReplace``."""
    parts = re.split(r"[^0-9A-Za-z]+", text)
    return "".join(part[:1].upper() + part[1:] for part in parts if part)


def snake(name: str) -> str:
    """A wire name as a Python field name (``sessionId`` → ``session_id``)."""
    if name.startswith("_"):
        name = "field" + name
    text = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    return text + "_" if keyword.iskeyword(text) else text


def ref_name(schema: Schema) -> str | None:
    """The definition a ``$ref`` (or a lone ``allOf`` of one) names."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[-1]
    return None


def refs_in(schema: object) -> Iterator[str]:
    """Every definition ``schema`` refers to, at any depth."""
    if isinstance(schema, dict):
        if isinstance(schema.get("$ref"), str):
            yield schema["$ref"].rsplit("/", 1)[-1]
        for value in schema.values():
            yield from refs_in(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from refs_in(item)


def closure(defs: Mapping[str, Schema], roots: tuple[str, ...]) -> list[str]:
    """The definitions reachable from ``roots``, sorted."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(refs_in(defs[name]))
    return sorted(seen)


def variants_of(schema: Schema) -> list[Schema]:
    """The branches of a ``oneOf``/``anyOf``."""
    return list(schema.get("oneOf") or schema.get("anyOf") or [])


def doc_of(schema: Schema) -> str:
    """The first paragraph of a description, for a docstring."""
    text = str(schema.get("description", "")).strip()
    first = text.split("\n\n", 1)[0].replace("\\", "\\\\").replace('"""', "'''")
    return " ".join(first.split())


@dataclass
class Module:
    """The generated module, in three parts emitted in a fixed order."""

    defs: Mapping[str, Schema]
    aliases: dict[str, str] = field(default_factory=dict)
    structs: dict[str, list[str]] = field(default_factory=dict)
    variants: dict[str, list[str]] = field(default_factory=dict)
    unions: dict[str, str] = field(default_factory=dict)


class Generator:
    """Turns schema definitions into Python source, one rule per schema shape."""

    def __init__(self, defs: Mapping[str, Schema], known: Module | None = None) -> None:
        self.module = Module(defs)
        self.known = known or self.module
        """What an earlier pass learnt: which names are structs, variants and unions."""

    # -- types of values --------------------------------------------------------------

    def type_of(self, schema: Schema) -> str:
        """The Python annotation of a property's schema."""
        name = ref_name(schema)
        if name is not None:
            return name
        if "const" in schema:
            return f"Literal[{json.dumps(schema['const'])}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
        if "oneOf" in schema or "anyOf" in schema:
            return self.inline_union(variants_of(schema))
        kind = schema.get("type")
        if isinstance(kind, list):
            types = [self.type_of({**schema, "type": k}) for k in kind if k != "null"]
            return join([*types, "None"] if "null" in kind else types)
        return self.primitive(kind, schema)

    def primitive(self, kind: object, schema: Schema) -> str:
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            items = schema.get("items")
            return f"list[{self.type_of(items)}]" if isinstance(items, dict) else RAW_ARRAY
        if kind == "object":
            return RAW_OBJECT
        return RAW

    def inline_union(self, variants: list[Schema]) -> str:
        """A union written inline (``X | None``); raw when msgspec could not decode it."""
        types = [self.type_of(variant) for variant in variants]
        return join(types) if decodable(types, self.known) else RAW

    # -- definitions ------------------------------------------------------------------

    def define(self, name: str) -> None:
        schema = self.module.defs[name]
        if "properties" in schema:
            self.struct(name, schema)
        elif "oneOf" in schema or "anyOf" in schema:
            self.union(name, schema)
        else:
            self.module.aliases[name] = self.type_of(schema)

    def struct(self, name: str, schema: Schema) -> None:
        required = set(schema.get("required", ()))
        properties: dict[str, Schema] = dict(schema["properties"])
        extra = self.variant_properties(schema, set(properties))
        lines = [f"class {name}(WireStruct):", f'    """{doc_of(schema) or name}"""', ""]
        fields = [(wire, prop, wire in required) for wire, prop in properties.items()]
        fields += [(wire, prop, False) for wire, prop in extra.items()]
        for wire, prop, needed in sorted(fields, key=lambda f: (not f[2], f[0])):
            lines.append(self.field_line(wire, prop, needed))
        self.module.structs[name] = lines

    def variant_properties(self, schema: Schema, own: set[str]) -> dict[str, Schema]:
        """Properties only the variants of an object with properties define (optional)."""
        merged: dict[str, list[Schema]] = {}
        for variant in variants_of(schema):
            base = ref_name(variant)
            props = dict(variant.get("properties", {}))
            if base is not None:
                defined = self.module.defs[base]
                props.update(defined.get("properties", {}))
                props.update(self.variant_properties(defined, set(props)))
            for wire, prop in props.items():
                if wire not in own:
                    merged.setdefault(wire, []).append(prop)
        out: dict[str, Schema] = {}
        for wire, props in merged.items():
            types = {self.type_of(p) for p in props}
            literal = all("const" in p for p in props)
            out[wire] = props[0] if len(types) == 1 else ({"type": "string"} if literal else {})
        return out

    def field_line(self, wire: str, prop: Schema, needed: bool) -> str:
        annotation = self.type_of(prop)
        python = snake(wire)
        rename = f'name="{wire}"' if python != wire else ""
        if needed:
            value = f" = msgspec.field({rename})" if rename else ""
            return f"    {python}: {annotation}{value}"
        if annotation != RAW and "None" not in annotation.split(" | "):
            annotation += " | None"
        value = f"msgspec.field(default=None, {rename})" if rename else "None"
        return f"    {python}: {annotation} = {value}"

    def union(self, name: str, schema: Schema) -> None:
        variants = variants_of(schema)
        tag = schema.get("discriminator", {}).get("propertyName")
        if tag is not None and all(self.tag_value(v, tag) is not None for v in variants):
            members = [self.tagged_variant(name, v, tag) for v in variants]
            self.module.unions[name] = join(members)
            return
        if all(v.get("type") == "string" for v in variants):
            closed = all("const" in v for v in variants)
            self.module.aliases[name] = self.type_of(
                {"enum": [v["const"] for v in variants]} if closed else {"type": "string"}
            )
            return
        if all(v.get("type") == "integer" for v in variants):
            self.module.aliases[name] = "int"
            return
        types = [self.type_of(v) for v in variants]
        if decodable(types, self.known):
            self.module.unions[name] = join(types)
        elif all(v.get("type", "object") == "object" for v in variants):
            self.module.aliases[name] = RAW_OBJECT
        elif all(v.get("type") == "array" for v in variants):
            self.module.aliases[name] = RAW_ARRAY
        else:
            self.module.aliases[name] = RAW

    @staticmethod
    def tag_value(variant: Schema, tag: str) -> str | None:
        value = variant.get("properties", {}).get(tag, {}).get("const")
        return value if isinstance(value, str) else None

    def tagged_variant(self, union: str, variant: Schema, tag: str) -> str:
        value = self.tag_value(variant, tag)
        assert value is not None
        name = pascal(value) + union
        base = ref_name(variant) or "WireStruct"
        doc = doc_of(variant) or f"``{tag}: {value!r}``"
        self.module.variants[name] = [
            f'class {name}({base}, tag_field="{tag}", tag="{value}"):',
            f'    """{doc}"""',
        ]
        return name


def join(types: list[str]) -> str:
    """``A | B | None`` without repeats, ``None`` last."""
    unique = list(dict.fromkeys(t for t in types if t != "None"))
    if "None" in types:
        unique.append("None")
    return " | ".join(unique)


def decodable(types: list[str], module: Module) -> bool:
    """Whether msgspec can decode a union of ``types`` (at most one of each JSON kind,
    unless every object member is a tagged variant)."""
    kinds: list[str] = []
    for annotation in types:
        kind = kind_of(annotation, module)
        if kind == "tagged":
            continue
        if kind == "any" or kind in kinds:
            return False
        kinds.append(kind)
    return "object" not in kinds or not any(kind_of(t, module) == "tagged" for t in types)


def kind_of(annotation: str, module: Module) -> str:
    """The JSON kind an annotation decodes from."""
    if annotation in module.variants:
        return "tagged"
    if annotation in module.structs or annotation == RAW_OBJECT:
        return "object"
    if annotation in module.aliases:
        return kind_of(module.aliases[annotation], module)
    if annotation in module.unions:
        members = module.unions[annotation].split(" | ")
        return "tagged" if all(m in module.variants for m in members) else "any"
    if annotation.startswith("list["):
        return "array"
    if annotation.startswith("Literal["):
        return "str" if annotation[8:9] in "'\"" else "int"
    return {"str": "str", "int": "int", "float": "float", "bool": "bool", "None": "null"}.get(
        annotation, "any"
    )


def render(schema: Schema, target: Target) -> str:
    """The source of ``target``'s module for ``schema``."""
    defs: Mapping[str, Schema] = schema["$defs"]
    names = closure(defs, target.roots)
    # Two passes: whether a union can be decoded depends on what its members are
    # (structs, tagged variants, other unions), which the first pass learns.
    known: Module | None = None
    for _ in range(2):
        generator = Generator(defs, known)
        for name in names:
            generator.define(name)
        known = generator.module
    module = generator.module
    out = [HEADER.format(version=target.version, schema=target.schema)]
    if "Literal[" not in "\n".join(_bodies(module)):
        out[0] = out[0].replace("from typing import Literal\n\n", "")
    out += [f"{name} = {value}" for name, value in sorted(module.aliases.items())]
    out += ["", "", WIRE_STRUCT]
    for name in sorted(module.structs):
        out += ["", "", *module.structs[name]]
    for name in sorted(module.variants):
        out += ["", "", *module.variants[name]]
    out += ["", ""]
    out += [f"{name} = {value}" for name, value in ordered_unions(module.unions)]
    out += ["", "", methods_block(defs)]
    return "\n".join(out).rstrip() + "\n"


def _bodies(module: Module) -> list[str]:
    """Every generated line: aliases, structs, variants and unions."""
    lines = [*module.aliases.values(), *module.unions.values()]
    for body in (*module.structs.values(), *module.variants.values()):
        lines += body
    return lines


def ordered_unions(unions: Mapping[str, str]) -> list[tuple[str, str]]:
    """Unions sorted, each after the unions it names (they are evaluated at import)."""
    done: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        for member in unions[name].split(" | "):
            if member in unions:
                visit(member)
        done.append(name)

    for name in sorted(unions):
        visit(name)
    return [(name, unions[name]) for name in done]


def methods(defs: Mapping[str, Schema], side: str) -> dict[str, str]:
    """The methods the ``side`` (``agent``, ``client``) handles, by key: the method with
    its separators as underscores, in snake case (``session/set_mode`` → ``session_set_mode``,
    ``document/didOpen`` → ``document_did_open``), sorted."""
    found = {
        str(d["x-method"]) for d in defs.values() if d.get("x-side") == side and "x-method" in d
    }
    return {snake(re.sub(r"[^0-9A-Za-z]+", "_", m).strip("_")): m for m in sorted(found)}


def methods_block(defs: Mapping[str, Schema]) -> str:
    lines = []
    for side, title in (("agent", "AGENT_METHODS"), ("client", "CLIENT_METHODS")):
        lines.append(f"{title}: dict[str, str] = {{")
        lines += [f'    "{k}": "{v}",' for k, v in methods(defs, side).items()]
        lines.append("}")
    return "\n".join(lines)


HEADER = '''"""The ACP wire types: msgspec Structs generated from the official JSON schema.

Generated by ``scripts/gen_acp_types.py`` from ``{schema}``
(protocol version {version}; the source and tag are noted beside the schema).
Do not edit: change the script or the schema, then run it again
(``tests/acp/test_wire_generated.py`` fails when this file and a fresh run differ).
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Literal

import msgspec

PROTOCOL_VERSION = {version}
'''

WIRE_STRUCT = '''class WireStruct(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A value on the wire: unset optional fields are left out of the encoded frame."""'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a module is stale")
    args = parser.parse_args()
    stale = 0
    for target in TARGETS:
        source = render(json.loads((ROOT / target.schema).read_text()), target)
        output = ROOT / target.output
        if not args.check:
            output.write_text(source)
        elif not output.is_file() or output.read_text() != source:
            print(f"{target.output} is stale: run scripts/gen_acp_types.py")
            stale = 1
    return stale


if __name__ == "__main__":
    sys.exit(main())
