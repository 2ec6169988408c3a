"""The command line's reference page, from the ``kafleet`` parser itself.

Owns: walking an argparse parser, its subcommands (``kafleet worker``, ``kafleet sidecar``,
...) and their argument groups into rows: each argument's flags or name, the value it takes,
its choices, default and help (with ``%(default)s`` and the like filled in as ``--help``
would). ``page()`` is the Markdown; ``build()`` makes it from ``kafleet.cli.main.build_parser``
with no ``KAFLEET_*`` or ``POD_*`` variable set, since some defaults are read from them.

Does not own the commands or their flags (``kafleet/cli/``, and the modules each subcommand
delegates to), nor the configuration fields behind ``kafleet worker``'s flags
(``configuration.py``'s page).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath

from docgen import markdown

__all__ = ["Argument", "Command", "Group", "commands", "page"]


@dataclass(frozen=True)
class Argument:
    """One argument of a command, as the page shows it (Markdown cells)."""

    flags: tuple[str, ...]  # ("--port",), or the name of a positional argument
    value: str  # the metavar, "" for a switch
    default: str
    help: str


@dataclass(frozen=True)
class Group:
    """An argument group of a command (``options``, ``positional arguments``, or its own)."""

    title: str
    description: str
    arguments: tuple[Argument, ...]


@dataclass(frozen=True)
class Command:
    """A command or a subcommand: ``kafleet``, ``kafleet worker``."""

    prog: str
    summary: str  # the help its parent's list gives it
    description: str
    groups: tuple[Group, ...]
    subcommands: tuple[str, ...]


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    # Filled in by the parser's own formatter (%(default)s, %(prog)s...), as --help does.
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        choices = ", ".join(map(str, action.choices))
        text = f"{text} (one of {choices})" if text else f"One of {choices}."
    return text


def _default(action: argparse.Action) -> str:
    value = action.default
    if value is None or value is argparse.SUPPRESS or value == [] or action.nargs == 0:
        return ""
    if isinstance(value, PurePath):
        value = str(value)
    return markdown.literal(value) if not isinstance(value, str) else value


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if isinstance(action.metavar, str):
        return action.metavar
    if not action.option_strings:
        return action.dest
    return action.dest.upper().rsplit(":", 1)[-1].replace(".", "_")


def argument(action: argparse.Action, parser: argparse.ArgumentParser) -> Argument:
    return Argument(
        flags=tuple(action.option_strings) or (_value(action),),
        value=_value(action) if action.option_strings else "",
        default=_default(action),
        help=_help(action, parser),
    )


def commands(parser: argparse.ArgumentParser, summary: str = "") -> Iterator[Command]:
    """The parser as a command, then each of its subcommands (depth first)."""
    groups = []
    subcommands: dict[str, tuple[argparse.ArgumentParser, str]] = {}
    for group in parser._action_groups:
        found = []
        for action in group._group_actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, sub in action.choices.items():
                    subcommands[name] = (sub, helps.get(name, ""))
            elif not isinstance(action, argparse._HelpAction):
                found.append(argument(action, parser))
        if found:
            groups.append(Group(group.title or "", group.description or "", tuple(found)))
    yield Command(parser.prog, summary, parser.description or "", tuple(groups), tuple(subcommands))
    for sub, help_text in subcommands.values():
        yield from commands(sub, help_text)


def _table(group: Group) -> str:
    return markdown.table(
        ["Argument", "Default", "Help"],
        [
            [", ".join(markdown.code(f"{flag} {a.value}".strip()) for flag in a.flags),
             markdown.code(a.default) if a.default else "", markdown.prose(a.help)]
            for a in group.arguments
        ],
    )  # fmt: skip


INTRO = """\
# Command line

The `kafleet` command, generated at each build of this site from its argparse parser
(`kafleet/cli/main.py` and the modules each subcommand hands its flags to). Every command also
takes `-h` / `--help`. Defaults are those with no `KAFLEET_*` or `POD_*` variable set: some are
read from them. `kafleet worker`'s configuration flags are the fields of the
[worker's configuration](configuration.md), whose defaults, bounds and environment variables
are there.
"""


def page(found: list[Command]) -> str:
    """The command line's reference page, Markdown."""
    parts = [INTRO]
    for command in found:
        parts.append(f"## `{command.prog}`\n")
        about = [markdown.prose(command.description or command.summary)]
        if command.subcommands:
            names = ", ".join(markdown.code(f"{command.prog} {s}") for s in command.subcommands)
            about.append(f"Subcommands: {names}.")
        parts.append(" ".join(a for a in about if a) + "\n")
        for group in command.groups:
            if group.title not in ("options", "positional arguments") or len(command.groups) > 1:
                parts.append(f"### {group.title[:1].upper()}{group.title[1:]}\n")
            if group.description:
                parts.append(markdown.prose(group.description) + "\n")
            parts.append(_table(group))
    return "\n".join(parts)


@contextlib.contextmanager
def _without_environment(prefixes: tuple[str, ...]) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def build() -> str:
    """The page from the running code's parser."""
    from kafleet.cli.main import build_parser

    with _without_environment(("KAFLEET_", "POD_")):
        parser = build_parser()
    found = list(commands(parser))
    if any(not c.groups for c in found if c.prog == "kafleet operator"):
        raise RuntimeError("kafleet operator's flags need kopf: pip install 'kafleet[operator]'")
    return page(found)
