"""``tether.acp.wire`` is exactly what ``scripts/gen_acp_types.py`` makes of the schema."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from tether.acp import wire
from tether.acp.v2 import wire as wire_v2

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_acp_types", ROOT / "scripts" / "gen_acp_types.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("target", GEN.TARGETS, ids=lambda t: f"v{t.version}")
def test_wire_module_equals_a_fresh_generation(target: Any) -> None:
    fresh = GEN.render(json.loads((ROOT / target.schema).read_text()), target)
    committed = (ROOT / target.output).read_text()
    assert committed == fresh, f"{target.output} is stale: run scripts/gen_acp_types.py"


@pytest.mark.parametrize("target", GEN.TARGETS, ids=lambda t: f"v{t.version}")
def test_every_root_definition_is_generated(target: Any) -> None:
    module = importlib.import_module(target.output[len("src/") : -len(".py")].replace("/", "."))
    missing = [name for name in target.roots if not hasattr(module, name)]
    assert missing == []
    assert target.version == module.PROTOCOL_VERSION


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (module, name)
        for module in (wire, wire_v2)
        for name, value in sorted(vars(module).items())
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    ],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_every_struct_can_be_decoded(module: ModuleType, name: str) -> None:
    """msgspec accepts each type (a union it could not decode would raise ``TypeError``)."""
    msgspec.json.Decoder(getattr(module, name))


def test_a_tagged_union_decodes_to_its_variant() -> None:
    request = msgspec.convert(
        {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}, wire.PromptRequest
    )
    assert request.prompt == [wire.TextContentBlock(text="hi")]
    answer = msgspec.convert({"outcome": {"outcome": "cancelled"}}, wire.RequestPermissionResponse)
    assert isinstance(answer.outcome, wire.CancelledRequestPermissionOutcome)


def test_unset_optional_fields_stay_off_the_wire() -> None:
    encoded = msgspec.json.encode(wire.PromptResponse(stop_reason="end_turn"))
    assert json.loads(encoded) == {"stopReason": "end_turn"}


def test_the_handshake_offers_the_protocol_version_of_the_schema() -> None:
    """The handshake keeps its own constant (it must not import msgspec before it answers)."""
    from tether.acp.handshake import PROTOCOL_VERSION

    assert PROTOCOL_VERSION == wire.PROTOCOL_VERSION


def test_the_version_2_handshake_offers_the_protocol_version_of_its_schema() -> None:
    from tether.acp.v2.handshake import VERSION

    assert VERSION == wire_v2.PROTOCOL_VERSION
