"""The package layers of docs/architecture.md: every import points down.

An import counts wherever it is written: at module level, inside a function,
in the ``else:`` of ``if TYPE_CHECKING:``, as ``importlib.import_module`` or
``__import__`` with a literal name, relative (``from . import x``), and through
the package root (``from tether import Tether`` is an import of
``tether.host``). Only the body of ``if TYPE_CHECKING:`` (annotations alone)
is left out.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"

_IMPORT_CALLS = {"import_module", "__import__"}


def _layers() -> dict[str, int]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"<!-- layers:[^>]*-->\n```\n(.*?)```", text, re.S)
    assert match, "docs/architecture.md lost its layer table"
    return {
        name: level
        for level, line in enumerate(match.group(1).splitlines())
        for name in line.split()
    }


def _facade() -> dict[str, str]:
    """The root's lazy exports: a name of ``tether`` and the module it comes from."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_EXPORTS":
            exports: dict[str, str] = ast.literal_eval(node.value)
            return exports
    raise AssertionError("src/tether/__init__.py lost its _EXPORTS table")


def _unit(module: str) -> str:
    """The layer unit of a dotted module name: ``tether.<first part>``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


def _is_type_checking(test: ast.expr) -> bool:
    """Whether ``test`` is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The nodes type checkers alone see: ``if TYPE_CHECKING:`` bodies, ``if not`` else-branches."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        if _is_type_checking(node.test):
            branch = node.body
        elif (
            isinstance(node.test, ast.UnaryOp)
            and isinstance(node.test.op, ast.Not)
            and _is_type_checking(node.test.operand)
        ):
            branch = node.orelse
        else:
            continue
        hidden.update(id(inner) for statement in branch for inner in ast.walk(statement))
    return hidden


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name ``from <node.module>`` means inside ``module``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _literal_import(node: ast.Call) -> str | None:
    """The literal module name of ``importlib.import_module("…")`` or ``__import__("…")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _IMPORT_CALLS or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _from_root(name: str, facade: dict[str, str]) -> str:
    """The module ``from tether import <name>`` imports: an export's, a submodule, or the root."""
    if name in facade:
        return facade[name]
    if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file():
        return f"tether.{name}"
    return "tether"


def _facade_aliases(tree: ast.AST, hidden: set[int]) -> set[str]:
    """The local names ``import tether`` (or ``import tether as x``) binds."""
    return {
        alias.asname or "tether"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and id(node) not in hidden
        for alias in node.names
        if alias.name == "tether" or (alias.asname is None and alias.name.startswith("tether."))
    }


def imports_of(source: str, module: str, is_package: bool = False) -> list[tuple[str, int]]:
    """Every ``tether`` module ``source`` (the text of ``module``) imports, with its line.

    A name taken from the package root counts as its own module, per the
    root's ``_EXPORTS``; ``tether.__version__`` and other plain attributes of
    the root count as ``tether``.
    """
    tree = ast.parse(source)
    hidden = _type_checking_nodes(tree)
    facade = _facade()
    aliases = _facade_aliases(tree, hidden)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module, is_package)
            if origin == "tether":
                found.extend((_from_root(a.name, facade), node.lineno) for a in node.names)
            else:
                found.append((origin, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)):
            found.append((literal, node.lineno))
        elif (
            isinstance(node, ast.Attribute)
            and getattr(node.value, "id", None) in aliases
            and node.attr in facade
        ):
            found.append((facade[node.attr], node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "tether"]


def upward_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of ``module`` that break the layer table, as ``line: what``."""
    layers = _layers()
    unit = _unit(module)
    upward: list[str] = []
    for imported, line in imports_of(source, module, is_package):
        target = _unit(imported)
        if target in {unit, "tether"}:
            continue
        if layers[target] >= layers[unit]:
            upward.append(f"{line}: {unit} imports {imported} ({target})")
    return upward


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
    upward: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        is_package = path.name == "__init__.py"
        if is_package:
            module = module.removesuffix(".__init__")
        if _unit(module) == "tether":  # the package root: lazy exports only
            continue
        where = path.relative_to(ROOT)
        upward.extend(
            f"{where}:{found}" for found in upward_imports(path.read_text(), module, is_package)
        )
    assert upward == []


def test_a_name_from_the_package_root_counts_as_its_own_module() -> None:
    source = "from tether import Tether, __version__\n"
    assert upward_imports(source, "tether.runtime.fake") == [
        "1: runtime imports tether.host (host)"
    ]


def test_an_attribute_of_an_imported_package_root_counts_as_its_own_module() -> None:
    source = "import tether\n\ndef make():\n    return tether.Tether()\n"
    assert upward_imports(source, "tether.session.fake") == [
        "4: session imports tether.host (host)"
    ]


def test_the_version_of_the_package_root_is_no_upward_import() -> None:
    source = "import tether\nfrom tether import __version__\nVERSION = tether.__version__\n"
    assert upward_imports(source, "tether.runtime.fake") == []


def test_an_import_in_the_else_of_type_checking_counts() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from tether.loop.turn import Turn\n"
        "else:\n"
        "    from tether.cli.main import main\n"
    )
    assert upward_imports(source, "tether.session.fake") == [
        "5: session imports tether.cli.main (cli)"
    ]


def test_only_the_type_checking_branch_of_if_not_type_checking_is_left_out() -> None:
    source = (
        "import typing\n"
        "if not typing.TYPE_CHECKING:\n"
        "    import tether.web.app\n"
        "else:\n"
        "    import tether.loop.turn\n"
    )
    assert upward_imports(source, "tether.session.fake") == [
        "3: session imports tether.web.app (web)"
    ]


def test_a_literal_importlib_import_counts() -> None:
    source = (
        "import importlib\n"
        "from importlib import import_module\n"
        "def load(name):\n"
        "    importlib.import_module('tether.loop.turn')\n"
        "    import_module('tether.acp.bridge')\n"
        "    __import__('tether.cli.main')\n"
        "    importlib.import_module(name)\n"
    )
    assert upward_imports(source, "tether.session.fake") == [
        "4: session imports tether.loop.turn (loop)",
        "5: session imports tether.acp.bridge (acp)",
        "6: session imports tether.cli.main (cli)",
    ]


def test_a_relative_import_counts() -> None:
    assert upward_imports("from ..loop import turn\n", "tether.session.fake") == [
        "1: session imports tether.loop (loop)"
    ]
    assert upward_imports("from .. import host\n", "tether.session", is_package=True) == [
        "1: session imports tether.host (host)"
    ]


FRONT_ENDS = ("acp", "web", "cli")
"""The packages that present sessions to people: they reach tools through the front layer."""


def plugin_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of a ``tether.plugins`` module by ``module``, as ``line: what``."""
    return [
        f"{line}: {_unit(module)} imports {imported}"
        for imported, line in imports_of(source, module, is_package)
        if _unit(imported) == "plugins"
    ]


def test_front_ends_import_no_plugin() -> None:
    found: list[str] = []
    for front_end in FRONT_ENDS:
        for path in sorted((SRC / front_end).rglob("*.py")):
            module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
            is_package = path.name == "__init__.py"
            if is_package:
                module = module.removesuffix(".__init__")
            where = path.relative_to(ROOT)
            found.extend(
                f"{where}:{hit}" for hit in plugin_imports(path.read_text(), module, is_package)
            )
    assert found == []


def test_a_front_end_importing_a_plugin_is_found_wherever_it_imports() -> None:
    source = (
        "from tether.plugins.terminal import CLIENT_TERMINAL\n"
        "def later():\n"
        "    from tether.plugins.fs.access import FILE_ACCESS\n"
        "from tether.front.seams import FILE_ACCESS\n"
    )
    assert plugin_imports(source, "tether.web.fake") == [
        "1: web imports tether.plugins.terminal",
        "3: web imports tether.plugins.fs.access",
    ]


def test_the_front_layer_sits_between_the_plugins_and_the_front_ends() -> None:
    layers = _layers()
    assert layers["plugins"] < layers["front"] < min(layers[name] for name in FRONT_ENDS)
