"""The configuration reference page: every field of the worker's ``ConsumerConfig``.

Owns: the page's sections (the top level, then each nested model, such as ``queue`` or
``spark.batch``) and, in each, a row per field: its name as the file spells it (dotted for a
nested one), type, default, bounds and allowed values as Markdown, description, the
``KAFLEET_*`` variable that sets it (from the model's own ``env_prefix`` and
``env_nested_delimiter``) and the ``kafleet worker`` flag, read from the worker's parser
(``worker_flags``), not guessed. ``page()`` is the Markdown.

Does not read the model itself: the leaf fields and what the model says of each (nested model,
type, default, bounds, pattern, allowed values) are ``kafleet.config.doc``'s, which
``python -m kafleet.config.doc`` prints as a table too. Nor does it own the fields
(``kafleet/config/``), the flags (``kafleet/cli/worker.py``), or the rules that span fields
(``kafleet/config/rules.py``; the page names the module). The CRD's own page is ``crd.py``'s.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from docgen import markdown
from kafleet.config import doc

__all__ = ["Field", "Section", "fields", "page", "sections", "worker_flags"]


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


def sections(model: type[BaseModel], path: str = "") -> Iterator[Section]:
    """The model and every model nested in it, depth first, in the order of the fields."""
    if not path:
        yield Section("", model, None, optional=False)
    for name, info in model.model_fields.items():
        nested, optional = doc.nested_model(info.annotation)
        if nested is not None:
            dotted = f"{path}{name}"
            yield Section(dotted, nested, info, optional)
            yield from sections(nested, f"{dotted}.")


def constraints(info: FieldInfo) -> str:
    """Bounds, lengths, the pattern and the allowed values of a field, as Markdown."""
    found = doc.bounds(info)
    pattern = doc.pattern(info)
    if pattern is not None:
        found.append(f"matches {markdown.code(pattern)}")
    choices = doc.choices(info.annotation)
    if choices:
        found.append("one of " + ", ".join(markdown.code(str(c)) for c in choices))
    return "; ".join(found)


def default_text(info: FieldInfo) -> str:
    """The default as it would be written in the file; ``required`` if there is none."""
    value = doc.default(info)
    if value is doc.REQUIRED:
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
    out: dict[str, list[Field]] = {section.path: [] for section in sections(model)}
    for dotted, info in doc.leaf_fields(model):
        env = env_prefix + dotted.upper().replace(".", env_delimiter)
        flag = flags.get(dotted)
        out[dotted.rpartition(".")[0]].append(
            Field(
                name=dotted,
                type=markdown.code(doc.type_text(info.annotation)),
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
