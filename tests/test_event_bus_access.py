"""Outside the runtime, events are listened to and dispatched through typed keys only.

Code above ``tether.runtime`` reaches the event bus through its context
(``ctx.on``, ``ctx.listen`` inside a composite effect, ``ctx.emit`` …), never
through ``ctx.runtime.events``: there a listener is registered by a string and
mypy cannot check it against the event's signature.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"


def bus_reads(source: str) -> list[int]:
    """The lines of ``source`` that read the runtime's event bus (``<x>.runtime.events``)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "events"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "runtime"
    ]


def test_the_check_finds_a_listener_registered_on_the_bus() -> None:
    source = "def lifecycle(ctx):\n    yield ctx.runtime.events.add('session/flush', print)\n"
    assert bus_reads(source) == [2]
    assert bus_reads("def f(ctx):\n    yield ctx.listen(SESSION_FLUSH, print)\n") == []


def test_no_code_outside_the_runtime_reaches_the_event_bus() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "runtime"
        for line in bus_reads(path.read_text())
    ]
    assert found == [], "use ctx.on / ctx.listen with a typed key instead"
