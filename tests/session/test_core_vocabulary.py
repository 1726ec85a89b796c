"""Every log tether writes loads without the plugins that wrote it."""

from __future__ import annotations

import importlib
import pkgutil

import tether
from tether.session import EventPayload, EventRegistry


def _payload_classes(base: type[EventPayload]) -> set[type[EventPayload]]:
    found: set[type[EventPayload]] = set()
    for cls in base.__subclasses__():
        found.add(cls)
        found |= _payload_classes(cls)
    return found


def test_every_event_type_a_tether_module_defines_is_in_the_core_registry() -> None:
    for module in pkgutil.walk_packages(tether.__path__, "tether."):
        importlib.import_module(module.name)
    written = {
        cls
        for cls in _payload_classes(EventPayload)
        if cls.__module__.startswith("tether.") and isinstance(getattr(cls, "type", None), str)
    }
    assert any(cls.type == "llm/retry" for cls in written)
    core = EventRegistry()

    def name(cls: type[EventPayload] | None) -> str | None:
        return None if cls is None else f"{cls.__module__}.{cls.__qualname__}"

    assert {cls.type: name(core.payload_class(cls.type)) for cls in written} == {
        cls.type: name(cls) for cls in written
    }
