"""The command line page has every subcommand of ``kafleet`` and every flag of each, with its
default and help as ``--help`` gives them."""

from __future__ import annotations

import argparse

import pytest

from docgen import cli
from kafleet.cli.main import build_parser
from tests.docs.pages import row, section


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name, found here apart from the generator's own walk."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_has_a_section_of_its_own() -> None:
    text = cli.build()

    choices = subcommands(build_parser())

    assert {"worker", "sidecar", "operator"} <= set(choices)
    for name in choices:
        assert f"## `kafleet {name}`" in text.splitlines()


def test_every_flag_of_every_command_is_on_the_page() -> None:
    text = cli.build()
    parser = build_parser()
    commands = [("kafleet", parser)]
    commands += [(f"kafleet {name}", sub) for name, sub in subcommands(parser).items()]

    for prog, command in commands:
        under = section(text, f"## `{prog}`")
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in under, f"{prog} {flag}"


def test_defaults_are_those_of_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFLEET_STATE_FILE", "/elsewhere/state.json")

    sidecar = section(cli.build(), "## `kafleet sidecar`")

    assert "`/var/run/kafleet/state.json`" in row(sidecar, "`--state-file STATE_FILE`")
    assert "/elsewhere" not in sidecar


def test_help_is_filled_in_as_help_would_and_choices_are_named() -> None:
    parser = argparse.ArgumentParser(prog="tool", description="A tool.")
    parser.add_argument("--tries", type=int, default=3, help="attempts (default %(default)s)")
    parser.add_argument("--mode", choices=["a", "b"], default="a", help="how")
    parser.add_argument("--quiet", action="store_true", help="say less")

    text = cli.page(list(cli.commands(parser)))

    assert "| `--tries TRIES` | `3` | attempts (default 3) |" in text
    assert "how (one of a, b)" in row(text, "`--mode MODE`")
    assert "| `--quiet` |  | say less |" in text
