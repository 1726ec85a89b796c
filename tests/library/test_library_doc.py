"""docs/library.md: its program runs as printed, and the package root exports what it names."""

import re
import subprocess
import sys
from pathlib import Path

import tether

DOC = Path(__file__).resolve().parents[2] / "docs" / "library.md"


def _program() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- library-program -->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/library.md lost its program"
    return match.group(1)


def test_the_documented_program_runs_and_does_what_it_says(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(_program())
    assert len(_program().strip().splitlines()) <= 30
    done = subprocess.run(
        [sys.executable, str(program), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    logged = [line.removeprefix("logged ") for line in lines if line.startswith("logged ")]
    # One turn ran; the queued prompt was inserted, then cancelled, and never ran.
    assert logged.count("turn/start") == 1 and logged.count("turn/end") == 1
    assert logged[-2:] == ["agent/inbox/spliced", "agent/inbox/spliced"]
    answers = [line for line in lines if line.startswith("answer: ")]
    assert answers == [
        'answer: This is the offline model, a script and not an LLM. You said: "hello".'
    ]
    assert "Traceback" not in done.stderr


def test_the_package_root_exports_its_public_api_lazily() -> None:
    for name in tether.__all__:
        assert getattr(tether, name) is not None, name
    from tether import AgentHandle, CancelCause, Session, Tether, UserMessage
    from tether.agent.types import AgentHandle as Defined
    from tether.host import Tether as Host

    assert AgentHandle is Defined and Tether is Host
    assert {CancelCause.USER, CancelCause.PARENT} <= set(CancelCause)
    assert Session.__name__ == "Session" and UserMessage.text("x").plain_text == "x"


def test_importing_tether_imports_nothing_else() -> None:
    code = "import sys, tether; print(sorted(m for m in sys.modules if m.startswith('tether')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tether']"


def test_every_export_is_listed_in_all() -> None:
    from tether import _EXPORTS  # type: ignore[attr-defined]

    assert set(tether.__all__) == {"__version__", *_EXPORTS}


def test_the_turn_handle_section_shows_the_example_a_test_runs() -> None:
    """The code under "the turn handle" is examples/turn_handles.py's, as it runs there."""
    import textwrap

    text = DOC.read_text()
    section = text[text.index("## What became of a prompt") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the turn handle section lost its code"
    example = (DOC.parents[1] / "examples" / "turn_handles.py").read_text()
    start, stop = example.index("        first = "), example.index("        await handle.dispose()")

    def lines(code: str) -> list[str]:
        return [line for line in code.splitlines() if line.strip()]

    assert lines(textwrap.dedent(example[start:stop])) == lines(match.group(1))
