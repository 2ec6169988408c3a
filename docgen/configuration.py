"""The configuration reference page: every field of the worker's ``ConsumerConfig``.

Owns: walking the frozen pydantic model into its sections (the top level, then each nested
model, such as ``queue`` or ``spark.batch``) and their fields, and writing each field's name as
the file spells it (dotted for a nested one), its type, default, bounds and allowed values,
description, the ``KAFLEET_*`` variable that sets it (from the model's own ``env_prefix`` and
``env_nested_delimiter``) and the ``kafleet worker`` flag, read from the worker's parser
(``worker_flags``), not guessed. ``page()`` is the Markdown.

Does not own the fields (``kafleet/config/``), the flags (``kafleet/cli/worker.py``), or the
rules that span fields (``kafleet/config/rules.py``; the page names the module). The CRD's own
page is ``crd.py``'s.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docgen import markdown

__all__ = ["Field", "Section", "fields", "page", "sections", "worker_flags"]

# The bounds pydantic keeps in a field's metadata, and how the page writes them.
_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


@dataclass(frozen=True)
class Field:
    """One leaf field of the configuration, as the page shows it (Markdown cells)."""

    name: str  # dotted: queue.max_records
    type: str
    default: str
    constraints: str
    description: str
    env: str
    flag: str


@dataclass(frozen=True)
class Section:
    """A model of the configuration: the top level (``path`` empty) or a nested one."""

    path: str  # "" for the top level, else dotted: spark.batch
    model: type[BaseModel]
    field: FieldInfo | None  # the parent's field that holds it (None at the top level)
    optional: bool  # the parent's field may be null: the section is off when unset


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (``SparkSettings | None`` too), and whether it may be null."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = [a for a in args if a is not type(None)] if optional else [annotation]
    if len(inner) == 1 and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
        return inner[0], optional
    return None, optional


def sections(model: type[BaseModel], path: str = "") -> Iterator[Section]:
    """The model and every model nested in it, depth first, in the order of the fields."""
    if not path:
        yield Section("", model, None, optional=False)
    for name, info in model.model_fields.items():
        nested, optional = _nested_model(info.annotation)
        if nested is not None:
            dotted = f"{path}{name}"
            yield Section(dotted, nested, info, optional)
            yield from sections(nested, f"{dotted}.")


def type_text(annotation: Any) -> str:
    """A field's type in Python's words without ``typing.``: ``int``, ``list[str]``,
    ``str | null`` (a Literal is written as the type of its values; they go to constraints)."""
    if annotation is type(None):
        return "null"
    if annotation is SecretStr:
        return "str (secret)"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(dict.fromkeys(type(a).__name__ for a in args))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(map(type_text, args))}]"
    return getattr(annotation, "__name__", str(annotation))


def _choices(annotation: Any) -> list[object]:
    """The values a ``Literal`` (or an optional one) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [v for a in typing.get_args(annotation) for v in _choices(a)]


def constraints(info: FieldInfo) -> str:
    """Bounds, lengths, the pattern and the allowed values of a field, as Markdown."""
    found: list[str] = []
    for meta in info.metadata:
        for attribute, sign in _BOUNDS:
            bound = getattr(meta, attribute, None)
            if bound is not None:
                found.append(f"{sign} {markdown.literal(bound)}")
        for attribute, words in (("min_length", "length ≥"), ("max_length", "length ≤")):
            length = getattr(meta, attribute, None)
            if length is not None:
                found.append(f"{words} {length}")
        pattern = getattr(meta, "pattern", None)
        if pattern is not None:
            found.append(f"matches {markdown.code(str(pattern))}")
    choices = _choices(info.annotation)
    if choices:
        found.append("one of " + ", ".join(markdown.code(str(c)) for c in choices))
    return "; ".join(found)


def default_text(info: FieldInfo) -> str:
    """The default as it would be written in the file; ``required`` if there is none."""
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        return "required"
    if value is None:
        return "unset"
    return markdown.code(markdown.literal(value))


def worker_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Dotted field name -> the ``kafleet worker`` flag that sets it, from the worker's parser
    (its configuration flags have the destination ``field:<dotted name>``; ``kafka`` has the
    repeatable ``--kafka PROPERTY=VALUE``)."""
    flags: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        dest = action.dest.removeprefix("field:")
        if action.dest.startswith("field:") or dest == "kafka":
            # A field's flag takes its value (VALUE, said once in the page's text); --kafka
            # takes PROPERTY=VALUE, which the row shows.
            metavar = action.metavar if isinstance(action.metavar, str) else "VALUE"
            shown = "" if metavar == "VALUE" else f" {metavar}"
            flags[dest] = f"{action.option_strings[0]}{shown}"
    return flags


def fields(
    model: type[BaseModel], flags: Mapping[str, str], env_prefix: str, env_delimiter: str
) -> dict[str, list[Field]]:
    """Every leaf field, by the dotted path of its section ("" for the top level)."""
    out: dict[str, list[Field]] = {}
    for section in sections(model):
        prefix = f"{section.path}." if section.path else ""
        rows = out.setdefault(section.path, [])
        for name, info in section.model.model_fields.items():
            if _nested_model(info.annotation)[0] is not None:
                continue  # a section of its own
            dotted = prefix + name
            env = env_prefix + dotted.upper().replace(".", env_delimiter)
            flag = flags.get(dotted)
            rows.append(
                Field(
                    name=dotted,
                    type=markdown.code(type_text(info.annotation)),
                    default=default_text(info),
                    constraints=constraints(info),
                    description=markdown.prose(info.description or ""),
                    env=markdown.code(env),
                    flag=markdown.code(flag) if flag else "none: the file or the variable",
                )
            )
    return out


INTRO = """\
# Configuration

Every field of a worker's configuration, `ConsumerConfig` (`kafleet/config/`), generated from
the model at each build of this site. A field is set, in rising order of precedence, in the YAML
file (`kafleet worker --config`), by its environment variable (`{prefix}*`, a nested field's path
joined with `{delimiter}`; a whole section may also be given as JSON), or by its flag of
`kafleet worker` (`--queue.max-records 2000`). The same names are the fields of a
ConsumerGroup's `spec` ([ConsumerGroup resource](consumergroup-crd.md)). Secrets have no flag:
a command line is visible to every process on the host.

A nested field is written with dots here and nested in the file: `queue.max_records: 2000` is

```yaml
queue:
  max_records: 2000
```

Each value is checked on its own (the bounds below), then by the rules that span fields
(`kafleet/config/rules.py`, such as `max_poll_records` within `queue.max_records`); a mistake
stops the worker with a message naming the field.
"""

HEAD = ["Field", "Type", "Default", "Allowed", "Environment variable, flag", "Description"]


def _rows(found: list[Field]) -> list[list[str]]:
    return [
        [markdown.code(f.name), f.type, f.default, f.constraints, f"{f.env}<br>{f.flag}",
         f.description]
        for f in found
    ]  # fmt: skip


def page(
    model: type[BaseModel], flags: Mapping[str, str], env_prefix: str, env_delimiter: str
) -> str:
    """The configuration reference page, Markdown."""
    found = fields(model, flags, env_prefix, env_delimiter)
    parts = [INTRO.format(prefix=env_prefix, delimiter=env_delimiter)]
    for section in sections(model):
        if not section.path:
            parts += ["## Top level\n", markdown.prose(model.__doc__ or "") + "\n"]
        else:
            parts.append(f"## `{section.path}`\n")
            about = [markdown.prose(section.model.__doc__ or "")]
            held = section.field.description if section.field is not None else None
            if section.optional:
                about.append(f"`{section.path}` is optional (unset by default)")
                about[-1] += f": {markdown.prose(held)}." if held else "."
            elif held:
                about.append(f"`{section.path}`: {markdown.prose(held)}.")
            parts.append(" ".join(a for a in about if a) + "\n")
        parts.append(markdown.table(HEAD, _rows(found[section.path])))
    return "\n".join(parts)


def build() -> str:
    """The page from the running code: ``ConsumerConfig`` and ``kafleet worker``'s parser."""
    from kafleet.cli import worker
    from kafleet.config.model import ConsumerConfig

    parser = argparse.ArgumentParser()
    worker.add_arguments(parser)
    config = ConsumerConfig.model_config
    return page(
        ConsumerConfig,
        worker_flags(parser),
        str(config.get("env_prefix", "")),
        str(config.get("env_nested_delimiter", "__")),
    )
