"""An evaluation of tether on a real model: a dozen small coding tasks, each checked.

Usage: python bench/eval_tasks.py --model REF --base-url URL [--tasks a,b] [--timeout S]
       [--runs N] [--json FILE] [--tether CMD]

Each task makes a scratch git repository, runs one ``tether run`` in it
(``--mode auto``, the default sandbox, ``--output-format stream-json``, a
private ``TETHER_HOME``) with the task's prompt, then checks the repository
and the answer with the task's own checker (running the code it wrote, not
reading the model's claims). It prints, per task, success, the model's
steps (``step/start`` events), tool calls and tool errors, prompt tokens and
how many of them the server served from its cache, output tokens and wall
time; then the totals. ``--runs N`` repeats each task (a small model is not
deterministic; the table then shows successes out of N). ``--json FILE``
writes every run's figures.

The endpoint is any OpenAI-compatible server (``--model
openai-compatible:NAME --base-url http://127.0.0.1:8087/v1``);
``scripts/local-model`` sets one up on this machine. This takes minutes per
task on a CPU and is never part of the test suite; tests/test_eval_tasks.py
checks only that each checker fails on the untouched repository and passes
on a reference solution, so a success here means the work was done.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

Files = dict[str, str]
Checker = Callable[[Path, str], tuple[bool, str]]


@dataclass(frozen=True)
class Task:
    """One task: the files of its repository, what the person asks, how to check it.

    ``solve`` is a reference solution (what a correct agent would leave in the
    repository, and its answer), used only by the tests of the checkers.
    """

    name: str
    files: Files
    prompt: str
    check: Checker
    solve: Callable[[Path], str]


@dataclass
class Outcome:
    """What one run of a task did."""

    task: str
    ok: bool
    detail: str
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    stop_reason: str | None = None
    answer: str = ""
    tools: list[str] = field(default_factory=list)


def _python(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``repo``, its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _write(repo: Path, name: str, text: str) -> None:
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


# -- the tasks ------------------------------------------------------------------------------

_MEAN = """
    def mean(values):
        \"\"\"The arithmetic mean of a non-empty list of numbers.\"\"\"
        total = 0
        for value in values:
            total += value
        return total / (len(values) + 1)
    """


def _check_mean(repo: Path, answer: str) -> tuple[bool, str]:
    probe = "from stats import mean; print(mean([1, 2, 3, 4]), mean([5]))"
    done = _python(repo, "-c", probe)
    return done.stdout.strip() == "2.5 5.0", done.stdout.strip() or done.stderr[-200:]


def _solve_mean(repo: Path) -> str:
    text = (repo / "stats.py").read_text().replace("(len(values) + 1)", "len(values)")
    (repo / "stats.py").write_text(text)
    return "Fixed the divisor."


_SLUG_TEST = """
    from text_utils import slugify
    assert slugify("Hello World") == "hello-world"
    assert slugify("  Many   spaces here ") == "many-spaces-here"
    assert slugify("ALL CAPS") == "all-caps"
    print("ok")
    """


def _check_slug(repo: Path, answer: str) -> tuple[bool, str]:
    tests = [p for p in repo.glob("test*.py") if "slugify" in p.read_text()]
    if not tests:
        return False, "no test file mentions slugify"
    ours = _python(repo, "-c", textwrap.dedent(_SLUG_TEST))
    if ours.stdout.strip() != "ok":
        return False, (ours.stderr or ours.stdout)[-200:]
    theirs = _python(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests[0].name)
    return theirs.returncode == 0, f"their test: exit {theirs.returncode}"


def _solve_slug(repo: Path) -> str:
    with (repo / "text_utils.py").open("a") as out:
        out.write('\n\ndef slugify(text):\n    return "-".join(text.lower().split())\n')
    _write(
        repo,
        "test_text_utils.py",
        "from text_utils import slugify\n\n\ndef test_slugify():\n"
        '    assert slugify("A  b") == "a-b"\n',
    )
    return "Added slugify and a test."


def _check_rename(repo: Path, answer: str) -> tuple[bool, str]:
    left = [p.name for p in repo.rglob("*.py") if "get_usr" in p.read_text()]
    if left:
        return False, f"get_usr still in {left}"
    done = _python(repo, "main.py")
    return done.stdout.strip() == "user 7: ada", done.stdout.strip() or done.stderr[-200:]


def _solve_rename(repo: Path) -> str:
    for path in repo.rglob("*.py"):
        path.write_text(path.read_text().replace("get_usr", "get_user"))
    return "Renamed."


def _check_port(repo: Path, answer: str) -> tuple[bool, str]:
    return "8421" in answer, answer[-120:]


def _check_failing_test(repo: Path, answer: str) -> tuple[bool, str]:
    if (repo / "test_cart.py").read_text() != textwrap.dedent(_CART_TEST).lstrip():
        return False, "the test file was changed"
    done = _python(repo, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_cart.py")
    last = done.stdout.strip().splitlines()[-1:] or [done.stderr[-200:]]
    return done.returncode == 0, last[0]


_CART_TEST = """
    from cart import total

    def test_total_applies_discount():
        assert total([10.0, 20.0], discount=0.1) == 27.0

    def test_total_without_discount():
        assert total([1.5, 2.5]) == 4.0
    """


def _solve_failing_test(repo: Path) -> str:
    text = (repo / "cart.py").read_text().replace("* discount", "* (1 - discount)")
    (repo / "cart.py").write_text(text)
    return "Fixed the discount."


def _check_background(repo: Path, answer: str) -> tuple[bool, str]:
    result = repo / "result.txt"
    if not result.exists():
        return False, "result.txt was never written (slow.py did not run to its end)"
    if not (repo / "notes.txt").exists():
        return False, "notes.txt missing"
    number = result.read_text().strip()
    return number in answer, f"result {number}; answer {answer[-80:]!r}"


def _solve_background(repo: Path) -> str:
    _python(repo, "slow.py")
    (repo / "notes.txt").write_text("waiting\n")
    return (repo / "result.txt").read_text().strip()


def _check_hello(repo: Path, answer: str) -> tuple[bool, str]:
    if not (repo / "hello.py").exists():
        return False, "hello.py missing"
    done = _python(repo, "hello.py")
    return done.stdout.strip() == "Hello, tether!", done.stdout.strip() or done.stderr[-200:]


def _solve_hello(repo: Path) -> str:
    _write(repo, "hello.py", 'print("Hello, tether!")\n')
    return "Done."


def _check_config(repo: Path, answer: str) -> tuple[bool, str]:
    try:
        config = json.loads((repo / "config.json").read_text())
    except ValueError as exc:
        return False, f"config.json no longer parses: {exc}"
    wanted = {"debug": False, "retries": 5, "name": "svc", "port": 9000}
    return config == wanted, json.dumps(config)


def _solve_config(repo: Path) -> str:
    (repo / "config.json").write_text(
        json.dumps({"name": "svc", "debug": False, "retries": 5, "port": 9000}, indent=2)
    )
    return "Done."


def _check_todo(repo: Path, answer: str) -> tuple[bool, str]:
    return "storage/disk.py" in answer or "disk.py" in answer, answer[-120:]


def _check_syntax(repo: Path, answer: str) -> tuple[bool, str]:
    done = _python(repo, "app.py")
    return done.stdout.strip() == "3 items", done.stdout.strip() or done.stderr[-200:]


def _solve_syntax(repo: Path) -> str:
    text = (repo / "app.py").read_text().replace("def count(items)\n", "def count(items):\n")
    (repo / "app.py").write_text(text)
    return "Fixed."


def _check_lines(repo: Path, answer: str) -> tuple[bool, str]:
    return re.search(r"\b38\b", answer) is not None, answer[-120:]


def _check_flag(repo: Path, answer: str) -> tuple[bool, str]:
    loud = _python(repo, "cli.py", "--verbose", "x")
    quiet = _python(repo, "cli.py", "x")
    ok = (
        "verbose on" in loud.stdout
        and "verbose on" not in quiet.stdout
        and "hello x" in loud.stdout
        and "hello x" in quiet.stdout
    )
    return ok, f"with: {loud.stdout.strip()!r} {loud.stderr[-80:]!r}; without: {quiet.stdout!r}"


def _solve_flag(repo: Path) -> str:
    text = (repo / "cli.py").read_text()
    text = text.replace(
        'parser.add_argument("name")\n',
        'parser.add_argument("name")\nparser.add_argument("--verbose", action="store_true")\n',
    ).replace(
        "args = parser.parse_args()\n",
        'args = parser.parse_args()\nif args.verbose:\n    print("verbose on")\n',
    )
    (repo / "cli.py").write_text(text)
    return "Added."


def _check_move(repo: Path, answer: str) -> tuple[bool, str]:
    if (repo / "helpers.py").exists():
        return False, "helpers.py still exists"
    if not (repo / "util" / "helpers.py").exists():
        return False, "util/helpers.py missing"
    done = _python(repo, "main.py")
    return done.stdout.strip() == "6", done.stdout.strip() or done.stderr[-200:]


def _solve_move(repo: Path) -> str:
    (repo / "util").mkdir(exist_ok=True)
    (repo / "util" / "__init__.py").write_text("")
    (repo / "helpers.py").rename(repo / "util" / "helpers.py")
    main = (repo / "main.py").read_text().replace("from helpers", "from util.helpers")
    (repo / "main.py").write_text(main)
    return "Moved."


def _answer_only(answer: str) -> Callable[[Path], str]:
    return lambda repo: answer


TASKS: tuple[Task, ...] = (
    Task(
        "fix-bug",
        {"stats.py": _MEAN},
        "mean() in stats.py returns wrong values: mean([1, 2, 3, 4]) should be 2.5. Fix it.",
        _check_mean,
        _solve_mean,
    ),
    Task(
        "add-function-and-test",
        {"text_utils.py": 'def shout(text):\n    return text.upper() + "!"\n'},
        "Add a function slugify(text) to text_utils.py that lowercases the text and joins its "
        "words with '-' (extra spaces ignored), and a pytest test for it in test_text_utils.py.",
        _check_slug,
        _solve_slug,
    ),
    Task(
        "rename-across-files",
        {
            "users.py": 'def get_usr(uid):\n    return f"user {uid}: ada"\n',
            "main.py": "from users import get_usr\n\nprint(get_usr(7))\n",
            "report.py": "from users import get_usr\n\n\ndef line(uid):\n    return get_usr(uid)\n",
        },
        "Rename the function get_usr to get_user everywhere in this repository.",
        _check_rename,
        _solve_rename,
    ),
    Task(
        "answer-question",
        {
            "server.py": (
                "import http.server\n\nPORT = 8421\n\n\ndef serve():\n"
                '    http.server.HTTPServer(("", PORT), http.server.SimpleHTTPRequestHandler)'
                ".serve_forever()\n"
            ),
            "README.md": "# svc\nA small service.\n",
        },
        "Which TCP port does server.py listen on? Answer with the number.",
        _check_port,
        _answer_only("8421"),
    ),
    Task(
        "repair-failing-test",
        {
            "cart.py": (
                "def total(prices, discount=0.0):\n"
                "    return round(sum(prices) * discount if discount else sum(prices), 2)\n"
            ),
            "test_cart.py": _CART_TEST,
        },
        "Run the tests with `python -m pytest -q` and fix the code (not the tests) so they pass.",
        _check_failing_test,
        _solve_failing_test,
    ),
    Task(
        "background-process",
        {
            "slow.py": (
                "import time\n\ntime.sleep(2)\n"
                "open('result.txt', 'w').write(str(sum(range(1, 101)) * 3) + '\\n')\n"
            ),
        },
        "Start `python slow.py` as a background task (it takes a few seconds and then writes "
        "result.txt). While it runs, create notes.txt containing the word waiting. Then wait "
        "for the background task to finish and tell me the number in result.txt.",
        _check_background,
        _solve_background,
    ),
    Task(
        "create-file",
        {"README.md": "# greetings\n"},
        "Create hello.py that prints exactly: Hello, tether!",
        _check_hello,
        _solve_hello,
    ),
    Task(
        "edit-config",
        {
            "config.json": json.dumps(
                {"name": "svc", "debug": True, "retries": 2, "port": 9000}, indent=2
            )
        },
        'In config.json set "debug" to false and "retries" to 5. Keep the other keys.',
        _check_config,
        _solve_config,
    ),
    Task(
        "find-todo",
        {
            "storage/__init__.py": "",
            "storage/disk.py": "def load(path):\n    # TODO: cache the parsed file\n"
            "    return open(path).read()\n",
            "storage/net.py": "def fetch(url):\n    return url\n",
            "main.py": "from storage.disk import load\n",
        },
        "Which file has the TODO comment about caching? Answer with its path.",
        _check_todo,
        _answer_only("storage/disk.py"),
    ),
    Task(
        "fix-syntax-error",
        {
            "app.py": (
                'def count(items)\n    return len(items)\n\n\nprint(f"{count([1, 2, 3])} items")\n'
            ),
        },
        "`python app.py` fails. Fix it so it runs.",
        _check_syntax,
        _solve_syntax,
    ),
    Task(
        "count-lines",
        {"data.csv": "id,name\n" + "".join(f"{i},item{i}\n" for i in range(1, 38))},
        "How many lines does data.csv have, header included? Answer with the number.",
        _check_lines,
        _answer_only("38"),
    ),
    Task(
        "add-cli-flag",
        {
            "cli.py": (
                "import argparse\n\nparser = argparse.ArgumentParser()\n"
                'parser.add_argument("name")\nargs = parser.parse_args()\n'
                'print(f"hello {args.name}")\n'
            ),
        },
        "Add a --verbose option to cli.py: when given, it prints 'verbose on' before the "
        "greeting. Without it the output stays the same.",
        _check_flag,
        _solve_flag,
    ),
    Task(
        "move-module",
        {
            "helpers.py": "def triple(n):\n    return 3 * n\n",
            "main.py": "from helpers import triple\n\nprint(triple(2))\n",
        },
        "Move helpers.py into a new package directory util/ (util/helpers.py) and update the "
        "import in main.py so `python main.py` still prints 6.",
        _check_move,
        _solve_move,
    ),
)


# -- running one task -----------------------------------------------------------------------


def make_repo(task: Task, where: Path) -> Path:
    """A git repository holding ``task``'s files, committed."""
    repo = where / task.name
    repo.mkdir(parents=True)
    for name, text in task.files.items():
        _write(repo, name, text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "eval", "GIT_AUTHOR_EMAIL": "eval@localhost"}
    env |= {"GIT_COMMITTER_NAME": "eval", "GIT_COMMITTER_EMAIL": "eval@localhost"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


def _fold(outcome: Outcome, line: str) -> None:
    """Add one stream-json line's figures to ``outcome``."""
    try:
        record = json.loads(line)
    except ValueError:
        return
    kind, data = record.get("type"), record.get("data") or {}
    if kind == "step/start":
        outcome.steps += 1
    elif kind == "tool/call":
        outcome.tool_calls += 1
        outcome.tools.append(str(data.get("name")))
    elif kind == "tool/result" and data.get("is_error"):
        outcome.tool_errors += 1
    elif kind == "assistant/message" and isinstance(data.get("usage"), dict):
        usage = data["usage"]
        outcome.input_tokens += int(usage.get("input_tokens") or 0)
        outcome.cached_tokens += int(usage.get("cached_input_tokens") or 0)
        outcome.output_tokens += int(usage.get("output_tokens") or 0)
    elif kind == "result":
        outcome.stop_reason = record.get("stop_reason")
        outcome.answer = record.get("answer") or record.get("error") or ""


def run_task(task: Task, args: argparse.Namespace, where: Path) -> Outcome:
    """Run ``task`` once with tether on the model of ``args``; check what it left."""
    repo = make_repo(task, where)
    home = where / f"{task.name}.home"
    home.mkdir()
    command = [
        *shlex.split(args.tether),
        "run",
        "--model",
        args.model,
        "--base-url",
        args.base_url,
        "--mode",
        "auto",
        "--cwd",
        str(repo),
        "--output-format",
        "stream-json",
        task.prompt,
    ]
    outcome = Outcome(task.name, False, "")
    started = time.monotonic()
    env = {**os.environ, "TETHER_HOME": str(home)}
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            env=env,
            cwd=repo,
        )
    except subprocess.TimeoutExpired as exc:
        outcome.seconds = time.monotonic() - started
        for line in (exc.stdout or b"").decode(errors="replace").splitlines():
            _fold(outcome, line)
        outcome.detail = f"timed out after {args.timeout:.0f} s"
        return outcome
    outcome.seconds = time.monotonic() - started
    for line in done.stdout.splitlines():
        _fold(outcome, line)
    if outcome.stop_reason is None:
        outcome.detail = f"no result line (exit {done.returncode}): {done.stderr.strip()[-200:]}"
        return outcome
    outcome.ok, outcome.detail = task.check(repo, outcome.answer)
    return outcome


def reference_outcome(task: Task, where: Path, solved: bool) -> tuple[bool, str]:
    """``task``'s checker on its repository, untouched or with the reference solution."""
    repo = make_repo(task, where)
    answer = task.solve(repo) if solved else ""
    return task.check(repo, answer)


# -- the report -----------------------------------------------------------------------------


def _row(cells: Sequence[object]) -> str:
    widths = (22, 5, 5, 6, 6, 9, 9, 7, 8)
    return "  ".join(
        f"{cell!s:>{w}}" if i else f"{cell!s:<{w}}"
        for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
    )


def report(outcomes: Sequence[Outcome], runs: int) -> str:
    """The table: one row per task (successes of ``runs``), then the totals."""
    header = ("task", "ok", "steps", "calls", "errors", "prompt", "cached", "output", "seconds")
    lines = [_row(header)]
    names = list(dict.fromkeys(o.task for o in outcomes))
    for name in names:
        mine = [o for o in outcomes if o.task == name]
        lines.append(_row(_cells(name, mine, runs)))
    lines.append(_row(_cells("total", list(outcomes), runs * len(names))))
    prompt = sum(o.input_tokens for o in outcomes)
    cached = sum(o.cached_tokens for o in outcomes)
    share = f"{100 * cached / prompt:.0f}%" if prompt else "n/a"
    lines.append(f"prompt tokens served from the server's cache: {share}")
    return "\n".join(lines)


def _cells(name: str, mine: Sequence[Outcome], runs: int) -> tuple[object, ...]:
    return (
        name,
        f"{sum(o.ok for o in mine)}/{runs}",
        sum(o.steps for o in mine),
        sum(o.tool_calls for o in mine),
        sum(o.tool_errors for o in mine),
        f"{sum(o.input_tokens for o in mine):,}",
        f"{sum(o.cached_tokens for o in mine):,}",
        f"{sum(o.output_tokens for o in mine):,}",
        f"{sum(o.seconds for o in mine):.0f}",
    )


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="e.g. openai-compatible:qwen2.5-coder-1.5b")
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8087/v1")
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per task run")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument(
        "--tether",
        default=shlex.quote(str(Path(sys.executable).with_name("tether"))),
        help="the command that runs tether (default: the tether beside this Python)",
    )
    args = parser.parse_args(argv)
    known = {task.name for task in TASKS}
    chosen = args.tasks.split(",") if args.tasks else list(known)
    unknown = sorted(set(chosen) - known)
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    args.chosen = [task for task in TASKS if task.name in chosen]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="tether-eval-") as scratch:
        for run in range(args.runs):
            for task in args.chosen:
                outcome = run_task(task, args, Path(scratch) / f"run{run}")
                outcomes.append(outcome)
                mark = "ok  " if outcome.ok else "FAIL"
                print(f"{mark} {task.name}: {outcome.detail}", file=sys.stderr, flush=True)
                if args.json:  # after every run: an interrupted evaluation keeps its figures
                    args.json.write_text(json.dumps([vars(o) for o in outcomes], indent=2) + "\n")
    print(report(outcomes, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
