"""Decoding configs and tool arguments: tether's msgspec schemas against the alternatives.

Usage: python bench/bench_schema.py [--runs N] [--old PATH]

Prints, for a tool call's arguments (the bash tool's) and a plugin config
(the shell executor's), the microseconds per decode of:

* ``tether.runtime.schema.decode`` (msgspec, lax numbers, tether's errors);
* plain ``msgspec.convert`` (the floor of the above);
* a pydantic model of the same fields (``model_validate``);
* with ``--old PATH`` (a checkout whose ``src/tether/runtime/checked.py``
  holds the former hand-written checks, stdlib only), that module's ``build``.

and the cost of a bad input (the error message built), plus what each
library costs to import and to define the classes, in a fresh interpreter.
Best of ``--runs`` for each figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import msgspec
from msgspec import Meta

from tether.plugins.tool_bash import BashArgs
from tether.runtime.schema import SchemaError, decode
from tether.shell.local import Config as ShellConfig

ARGS = {"command": "ls -la /tmp", "description": "list", "timeout_ms": "5000", "workdir": "sub"}
CONFIG = {"default_timeout_ms": 60_000, "max_timeout_ms": 300_000, "bash": "bash", "cwd": "/tmp"}
BAD_ARGS = {"command": "ls", "timeout_ms": "soon"}
LOOPS = 2_000


def best_us(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(LOOPS):
            fn()
        best = min(best, (time.perf_counter() - start) / LOOPS)
    return best * 1e6


def failing(fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        try:
            fn()
        except Exception as exc:  # each library raises its own error type
            return exc
        raise AssertionError("bad input was accepted")

    return run


def pydantic_models() -> tuple[type[Any], type[Any]]:
    from pydantic import BaseModel, ConfigDict, Field

    class PydanticBash(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        command: str = Field(description="the command line, run with bash -c")
        description: str | None = None
        timeout_ms: int | None = Field(default=None, gt=0)
        workdir: str | None = None
        run_in_background: bool = False

    class PydanticShell(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        default_timeout_ms: int = Field(default=120_000, ge=1)
        max_timeout_ms: int = Field(default=600_000, ge=1)
        default_output_bytes: int = Field(default=1 << 20, ge=1)
        max_output_bytes: int = Field(default=64 << 20, ge=1)
        cwd: str | None = None
        max_background_per_owner: int = Field(default=10, ge=1)
        kill_grace_ms: int = Field(default=2_000, ge=0)
        spill_dir: str | None = None
        bash: str = "bash"
        state_dir: str | None = None

    return PydanticBash, PydanticShell


def old_models(root: Path) -> tuple[Any, type[Any], type[Any]]:
    path = root / "src" / "tether" / "runtime" / "checked.py"
    spec = importlib.util.spec_from_file_location("old_checked", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_checked"] = module
    spec.loader.exec_module(module)
    source = textwrap.dedent(
        """
        from __future__ import annotations
        from dataclasses import dataclass, field
        from old_checked import Checked, meta

        @dataclass(frozen=True, slots=True)
        class OldBash(Checked):
            command: str = field(metadata=meta("the command line"))
            description: str | None = None
            timeout_ms: int | None = field(default=None, metadata=meta(gt=0))
            workdir: str | None = None
            run_in_background: bool = False

        @dataclass(frozen=True, slots=True)
        class OldShell(Checked):
            default_timeout_ms: int = field(default=120_000, metadata=meta(ge=1))
            max_timeout_ms: int = field(default=600_000, metadata=meta(ge=1))
            default_output_bytes: int = field(default=1 << 20, metadata=meta(ge=1))
            max_output_bytes: int = field(default=64 << 20, metadata=meta(ge=1))
            cwd: str | None = None
            max_background_per_owner: int = field(default=10, metadata=meta(ge=1))
            kill_grace_ms: int = field(default=2_000, metadata=meta(ge=0))
            spill_dir: str | None = None
            bash: str = "bash"
            state_dir: str | None = None
        """
    )
    sys.modules["old_models"] = type(sys)("old_models")
    exec(compile(source, "old_models", "exec"), sys.modules["old_models"].__dict__)
    namespace = sys.modules["old_models"].__dict__
    return module, namespace["OldBash"], namespace["OldShell"]


IMPORTS = {
    "msgspec (import + 2 Structs)": """
import msgspec
from typing import Annotated
class A(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    command: str
    timeout_ms: Annotated[int, msgspec.Meta(gt=0)] | None = None
msgspec.convert({"command": "x", "timeout_ms": "5"}, A, strict=False)
""",
    "pydantic (import + 1 model)": """
from pydantic import BaseModel, Field
class A(BaseModel):
    command: str
    timeout_ms: int | None = Field(default=None, gt=0)
A.model_validate({"command": "x", "timeout_ms": "5"})
""",
    "dataclasses + typing (the old checks' imports)": """
import dataclasses, enum, math, re, typing, weakref
from pathlib import Path
@dataclasses.dataclass(frozen=True, slots=True)
class A:
    command: str
    timeout_ms: int | None = None
typing.get_type_hints(A)
""",
}


def import_ms(body: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import asyncio\n" + body], check=True)
        best = min(best, time.perf_counter() - start)
    baseline = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import asyncio"], check=True)
        baseline = min(baseline, time.perf_counter() - start)
    return (best - baseline) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--old", type=Path, default=None)
    options = parser.parse_args()
    runs = options.runs

    class PlainBash(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
        command: str
        description: str | None = None
        timeout_ms: Annotated[int, Meta(gt=0)] | None = None
        workdir: str | None = None
        run_in_background: bool = False

    rows: list[tuple[str, Callable[[], object], Callable[[], object], Callable[[], object]]] = [
        (
            "tether schema (msgspec)",
            lambda: decode(BashArgs, ARGS, "arguments"),
            lambda: decode(ShellConfig, CONFIG),
            failing(lambda: decode(BashArgs, BAD_ARGS, "arguments")),
        ),
        (
            "msgspec.convert alone",
            lambda: msgspec.convert(ARGS, PlainBash, strict=False),
            lambda: msgspec.convert(CONFIG, ShellConfig, strict=False),
            failing(lambda: msgspec.convert(BAD_ARGS, PlainBash, strict=False)),
        ),
    ]
    pydantic_bash, pydantic_shell = pydantic_models()
    rows.append(
        (
            "pydantic model_validate",
            lambda: pydantic_bash.model_validate(ARGS),
            lambda: pydantic_shell.model_validate(CONFIG),
            failing(lambda: pydantic_bash.model_validate(BAD_ARGS)),
        )
    )
    if options.old is not None:
        old, old_bash, old_shell = old_models(options.old)
        rows.append(
            (
                "old hand checks (stdlib)",
                lambda: old.build(old_bash, ARGS),
                lambda: old.build(old_shell, CONFIG),
                failing(lambda: old.build(old_bash, BAD_ARGS)),
            )
        )
    try:
        decode(BashArgs, BAD_ARGS, "arguments")
    except SchemaError as exc:
        print(f"a bad call's message: {exc}")
    print(
        f"{'µs per decode, best of ' + str(runs):<32} {'arguments':>10} {'config':>10} {'bad':>10}"
    )
    for name, args, config, bad in rows:
        print(
            f"{name:<32} {best_us(args, runs):>10.2f} {best_us(config, runs):>10.2f} "
            f"{best_us(bad, runs):>10.2f}"
        )
    print("import and class definition, ms over a bare `import asyncio`:")
    for name, body in IMPORTS.items():
        print(f"  {name:<48} {import_ms(body, runs):6.1f}")


if __name__ == "__main__":
    main()
