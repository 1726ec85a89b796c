"""docs/events.md indexes every event key the code defines, and no other."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"
KINDS = {"Notice", "Serial", "Parallel", "Gather", "Waterfall"}


def _strings(tree: ast.Module) -> dict[str, str]:
    """The module-level ``NAME = "text"`` constants of a module."""
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def _is_key_class(node: ast.expr, aliases: set[str]) -> bool:
    """Whether ``node`` is ``Notice[...]`` (and the like), or a name bound to one."""
    if isinstance(node, ast.Subscript):
        return getattr(node.value, "id", None) in KINDS
    return isinstance(node, ast.Name) and node.id in aliases


def keys_in(source: str) -> set[str]:
    """The event keys ``source`` defines: the names of its ``Notice``/``Serial``/
    ``Parallel``/``Gather``/``Waterfall`` keys, and the ``type`` of each payload class."""
    tree = ast.parse(source)
    strings = _strings(tree)
    aliases = {
        node.targets[0].id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and _is_key_class(node.value, set())
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _is_key_class(node.func, aliases)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
        elif (
            isinstance(node, ast.AnnAssign)
            and getattr(node.target, "id", None) == "type"
            and "ClassVar" in ast.unparse(node.annotation)
            and node.value is not None
        ):
            value = node.value
            if isinstance(value, ast.Constant):
                found.add(value.value)
            elif isinstance(value, ast.Name) and value.id in strings:
                found.add(strings[value.id])
    return found


def _code_keys() -> set[str]:
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.parts[-3:] != ("tether", "runtime", "keys.py"):  # its docstring's examples
            found |= keys_in(path.read_text())
    return found


def _indexed_keys() -> set[str]:
    text = (ROOT / "docs" / "events.md").read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


def test_every_event_key_in_the_code_is_in_the_index() -> None:
    assert _code_keys() - _indexed_keys() == set(), "add them to docs/events.md"


def test_the_index_names_no_key_the_code_lacks() -> None:
    assert _indexed_keys() - _code_keys() == set(), "remove them from docs/events.md"


def test_a_new_key_of_either_kind_is_found() -> None:
    source = (
        "from typing import ClassVar\n"
        "_TYPE = 'demo/stored'\n"
        "DEMO = Notice[Agent]('demo/notice')\n"
        "Pair = Serial[int, Agent]\n"
        "PAIR = Pair('demo/serial')\n"
        "class Demo(EventStruct, frozen=True):\n"
        "    type: ClassVar[str] = _TYPE\n"
        "class Other(EventStruct, frozen=True):\n"
        "    type: ClassVar[str] = 'demo/other'\n"
    )
    assert keys_in(source) == {"demo/stored", "demo/notice", "demo/serial", "demo/other"}
    assert "demo/notice" not in _indexed_keys()
