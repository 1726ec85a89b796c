"""The package layers of docs/architecture.md: every import points down."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"


def _layers() -> dict[str, int]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"<!-- layers:[^>]*-->\n```\n(.*?)```", text, re.S)
    assert match, "docs/architecture.md lost its layer table"
    return {
        name: level
        for level, line in enumerate(match.group(1).splitlines())
        for name in line.split()
    }


def _unit(module: str) -> str:
    """The layer unit of a dotted module name: ``tether.<first part>``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            hidden.update(id(inner) for inner in ast.walk(node))
    return hidden


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    hidden = _type_checking_nodes(tree)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return [(name, line) for name, line in found if name.split(".")[0] == "tether"]


def test_every_package_is_placed_in_a_layer() -> None:
    layers = _layers()
    code = {
        path.stem
        for path in SRC.iterdir()
        if not path.name.startswith(("_", "."))
        and ((path.is_dir() and any(path.glob("*.py"))) or path.suffix == ".py")
    }
    assert code - set(layers) == set(), "packages missing from the layer table"
    assert set(layers) - code == set(), "the layer table names packages that do not exist"


def test_imports_only_point_down() -> None:
    layers = _layers()
    upward: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        source = _unit(module)
        if source == "tether":  # the package root: lazy exports only
            continue
        for imported, line in _imports(path):
            target = _unit(imported)
            if target in {source, "tether"}:
                continue
            if layers[target] >= layers[source]:
                where = path.relative_to(ROOT)
                upward.append(f"{where}:{line}: {source} imports {imported} ({target})")
    assert upward == []
