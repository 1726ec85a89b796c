"""The ``tether`` parser builds only the command it is given, and parses alike."""

from __future__ import annotations

import argparse

import pytest

from tether.cli.main import build_parser, command_of

COMMAND_LINES = [
    ["run", "hello"],
    ["--data-dir", "/d", "-v", "run", "--mode", "ask", "--output-format", "json", "task"],
    ["--config=a.yml", "--config", "b.yml", "--dev", "chat", "--resume", "abc"],
    ["sessions", "show", "abc", "--thinking"],
    ["sessions", "tail", "abc", "--after", "3"],
    ["config", "show", "--model", "offline"],
    ["config", "init", "--force"],
    ["doctor"],
    ["acp", "--mode", "auto", "--terminal", "client"],
    ["web", "--port", "8080", "--acp-grace", "5"],
    ["demo"],
]


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=" ".join)
def test_the_parser_of_one_command_parses_its_lines_as_the_whole_parser_does(
    argv: list[str],
) -> None:
    command = command_of(argv)
    assert command == next(word for word in argv if word in _commands())
    assert build_parser(command).parse_args(argv) == build_parser().parse_args(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--data", "run", "chat"],  # an abbreviation: argparse takes "run" as its value
        ["--verb", "run"],
        ["--unknown", "run"],
        ["--help"],
        [],
        ["bogus"],
        ["--data-dir"],
    ],
    ids=lambda argv: " ".join(argv) or "nothing",
)
def test_a_command_line_whose_command_is_uncertain_gets_the_whole_parser(
    argv: list[str],
) -> None:
    assert command_of(argv) is None


def test_the_help_lists_every_command_whatever_was_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    helps = []
    for command in (None, "run", "web"):
        with pytest.raises(SystemExit):
            build_parser(command).parse_args(["--help"])
        helps.append(capsys.readouterr().out)
    assert helps[0] == helps[1] == helps[2]
    for name in _commands():
        assert f"    {name} " in helps[0]


def test_a_command_built_without_its_options_is_never_the_one_parsed() -> None:
    # The run-only parser knows chat only by name: parsing a chat line with it
    # refuses chat's options, which is why main() builds from command_of().
    with pytest.raises(SystemExit):
        build_parser("run").parse_args(["chat", "--mode", "ask"])


def _commands() -> list[str]:
    subparsers = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    return list(subparsers.choices)


@pytest.mark.parametrize(
    ("argv", "usage", "unknown"),
    [
        (["run", "--bogus", "hi"], "tether run", "--bogus"),
        (["sessions", "list", "--zz"], "tether sessions list", "--zz"),
        (["config", "show", "--q"], "tether config show", "--q"),
    ],
)
def test_an_unknown_option_is_refused_by_the_parser_of_its_command(
    argv: list[str], usage: str, unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli.main import parse

    with pytest.raises(SystemExit) as exited:
        parse(build_parser(command_of(argv)), argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {usage} ")
    assert err.splitlines()[-1] == f"{usage}: error: unrecognized arguments: {unknown}"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["chat"]),
        (["-v", "--config", "a.yml"], ["-v", "--config", "a.yml", "chat"]),
        (["--data-dir=/d"], ["--data-dir=/d", "chat"]),
        (["--config"], ["--config"]),
        (["--help"], ["--help"]),
        (["--version"], ["--version"]),
        (["run", "x"], ["run", "x"]),
    ],
)
def test_a_bare_tether_opens_the_chat(argv: list[str], expected: list[str]) -> None:
    from tether.cli.main import with_default_command

    assert with_default_command(argv) == expected
