"""Composition rows, diff by id, reload and its rollback, the dev watcher."""

import asyncio
import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.runtime import CompositionError, FiberState, ReloadError, Runtime, ServiceKey
from tether.runtime.compose import Composer, PluginRow, load_composition, parse_composition
from tether.runtime.reload import watch

_ids = itertools.count()

STORE = """
class Store:
    def __init__(self):
        self.records = []
        self.changed = None

    def record(self, item):
        self.records.append(item)
        if self.changed is not None:
            self.changed.set()

def apply(ctx, config):
    from tether.runtime import ServiceKey

    ctx.provide(ServiceKey("store"), Store())
"""

WORKER = """
from pydantic import BaseModel

VERSION = {version}
module_state = []

class Config(BaseModel):
    tag: str = "default"

inject = ["store"]

def apply(ctx, config):
    {body}
    module_state.append(config.tag)
    ctx.store.record((VERSION, config.tag, len(module_state)))
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Write plugin modules with unique names into a directory on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(source: str, name: str | None = None) -> str:
        name = name or f"plugmod_{next(_ids)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def worker(version: int, body: str = "pass") -> str:
    return WORKER.format(version=version, body=body)


async def test_bad_rows_fail_alone_naming_row_and_field(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store = modules(STORE)
    good = modules(worker(1))
    composition = parse_composition(
        {
            "plugins": [
                {"id": "store", "plugin": store},
                {"id": "good", "plugin": good},
                {"id": "no-plugin"},
                {"id": "bad-config", "plugin": good, "config": {"tag": ["not", "a", "str"]}},
                {"id": "missing", "plugin": "no_such_module_anywhere"},
            ]
        }
    )
    composer = Composer(runtime.ctx)
    report = await composer.apply(composition)
    messages = {p.row: p.message for p in report.problems}
    assert "plugin: required" in messages["'no-plugin'"]
    assert "config.tag" in messages["'bad-config'"]
    assert "cannot import plugin 'no_such_module_anywhere'" in messages["'missing'"]
    assert composer.row("good").status == "active"
    assert runtime.services.provider_of("store") is composer.row("store").fiber


async def test_rows_mount_concurrently_and_order_comes_from_inject(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store, consumer = modules(STORE), modules(worker(1))
    composer = Composer(runtime.ctx)
    # The consumer comes first in the file; it waits, pending, for the store.
    report = await composer.apply(
        [PluginRow(id="consumer", plugin=consumer), PluginRow(id="store", plugin=store)]
    )
    assert report.ok
    assert [s.status for s in composer.rows()] == ["active", "active"]


async def test_applying_an_edited_composition_diffs_rows_by_id(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store, plugin = modules(STORE), modules(worker(1))
    composer = Composer(runtime.ctx)
    await composer.apply(
        [
            PluginRow(id="store", plugin=store),
            PluginRow(id="a", plugin=plugin, config={"tag": "a"}),
            PluginRow(id="b", plugin=plugin, config={"tag": "b"}),
            PluginRow(id="c", plugin=plugin, config={"tag": "c"}),
        ]
    )
    before = {s.row.id: s.fiber for s in composer.rows()}
    report = await composer.apply(
        [
            PluginRow(id="store", plugin=store),
            PluginRow(id="a", plugin=plugin, config={"tag": "a"}),
            PluginRow(id="b", plugin=plugin, config={"tag": "b2"}),
            PluginRow(id="d", plugin=plugin, config={"tag": "d"}),
        ]
    )
    assert (report.unchanged, report.remounted, report.removed, report.mounted) == (
        ("store", "a"),
        ("b",),
        ("c",),
        ("d",),
    )
    after = {s.row.id: s.fiber for s in composer.rows()}
    assert after["a"] is before["a"] and after["store"] is before["store"]
    assert after["b"] is not before["b"]
    c_fiber = before["c"]
    assert c_fiber is not None and c_fiber.state is FiberState.DISPOSED


async def test_disabled_rows_do_not_mount(runtime: Runtime, modules: Callable[..., str]) -> None:
    composer = Composer(runtime.ctx)
    await composer.apply([PluginRow(id="store", plugin=modules(STORE), disabled=True)])
    assert composer.row("store").status == "disabled"
    assert not runtime.services.has("store")


def test_composition_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tether.yml"
    path.write_text("plugins: [unclosed")
    with pytest.raises(CompositionError, match="invalid YAML"):
        load_composition(path)
    path.write_text("rows: []")
    with pytest.raises(CompositionError, match="'plugins'"):
        load_composition(path)
    path.write_text("plugins:\n  - {id: x, plugin: a.b}\n  - {id: x, plugin: a.c}\n")
    composition = load_composition(path)
    assert [r.id for r in composition.rows] == ["x"]
    assert "duplicate id" in str(composition.problems[0])


async def _store(composer: Composer):  # type: ignore[no-untyped-def]
    state = composer.row("store")
    assert state.fiber is not None
    return composer.ctx.get(ServiceKey("store"))


async def test_reload_keeps_service_state_and_loses_module_state(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store_mod = modules(STORE)
    name = modules(worker(1))
    composer = Composer(runtime.ctx)
    await composer.apply(
        [
            PluginRow(id="store", plugin=store_mod),
            PluginRow(id="w", plugin=name, config={"tag": "t"}),
        ]
    )
    old_fiber = composer.row("w").fiber
    modules(worker(2), name=name)
    await composer.reload("w")
    store = await _store(composer)
    # The store (another fiber's service) kept its records; the module-level
    # list started over in the new module.
    assert store.records == [(1, "t", 1), (2, "t", 1)]
    assert old_fiber is not None and old_fiber.state is FiberState.DISPOSED
    assert composer.row("w").status == "active"
    assert sys.modules[name].VERSION == 2


async def test_reload_with_broken_import_changes_nothing(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store_mod, name = modules(STORE), modules(worker(1))
    composer = Composer(runtime.ctx)
    await composer.apply([PluginRow(id="store", plugin=store_mod), PluginRow(id="w", plugin=name)])
    fiber = composer.row("w").fiber
    modules("def broken(:\n", name=name)
    with pytest.raises(ReloadError, match="SyntaxError"):
        await composer.reload("w")
    assert composer.row("w").fiber is fiber
    assert fiber is not None and fiber.state is FiberState.ACTIVE


async def test_reload_whose_apply_fails_rolls_back_to_the_old_code(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store_mod, name = modules(STORE), modules(worker(1))
    composer = Composer(runtime.ctx)
    await composer.apply([PluginRow(id="store", plugin=store_mod), PluginRow(id="w", plugin=name)])
    modules(worker(2, body="raise RuntimeError('new code is broken')"), name=name)
    with pytest.raises(ReloadError, match=r"new code is broken.*previous code was restored"):
        await composer.reload("w")
    store = await _store(composer)
    assert [version for version, _tag, _n in store.records] == [1, 1]
    assert composer.row("w").status == "active"
    assert sys.modules[name].VERSION == 1


async def test_reload_of_unknown_row_is_a_clear_error(runtime: Runtime) -> None:
    with pytest.raises(ReloadError, match="no row with id 'ghost'"):
        await Composer(runtime.ctx).reload("ghost")


async def test_dev_watcher_reloads_a_row_when_its_file_changes(
    runtime: Runtime, modules: Callable[..., str]
) -> None:
    store_mod, name = modules(STORE), modules(worker(1))
    composer = Composer(runtime.ctx)
    await composer.apply([PluginRow(id="store", plugin=store_mod), PluginRow(id="w", plugin=name)])
    store = await _store(composer)
    store.changed = asyncio.Event()
    await watch(composer)
    modules(worker(7), name=name)
    await asyncio.wait_for(store.changed.wait(), timeout=20)
    assert store.records[-1][0] == 7
