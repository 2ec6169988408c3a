"""The configuration's field names, what the model says of each field, and its reference table.

Owns: ``leaf_fields``, the dotted names of every leaf field of ``ConsumerConfig`` (the names
the file, the ``KAFLEET_*`` variables and ``kafleet worker``'s flags share); what the model
checks of a field, read from pydantic's field info: the nested model it holds
(``nested_model``), its type in Python's words (``type_text``), its default (``default``), its
bounds and lengths (``bounds``), pattern (``pattern``) and allowed values (``choices``); and the
table made from them, which ``python -m kafleet.config.doc`` prints. The documentation site's
Configuration page (``docgen/configuration.py``) is made from the same functions at each build,
adding each field's variable and the flag read from the worker's parser.

Does not own the fields (``model.py``) or the flags (``kafleet/cli/worker.py``, a layer above:
the table here writes a flag as the worker names it, ``--`` and the dotted name with dashes).
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kafleet.config.model import ConsumerConfig

# A field with no default: ``default(info) is REQUIRED``.
REQUIRED = object()

# The bounds pydantic keeps in a field's metadata, and how they are written.
_BOUNDS = (
    ("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"),
    ("min_length", "length ≥"), ("max_length", "length ≤"),
)  # fmt: skip


def nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (``SparkSettings | None`` too), and whether it may be null."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    inner = [a for a in args if a is not type(None)] if optional else [annotation]
    if len(inner) == 1 and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
        return inner[0], optional
    return None, optional


def leaf_fields(
    model: type[BaseModel] = ConsumerConfig, prefix: str = ""
) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted name, field) of every leaf field, into nested models (optional ones too, such
    as ``spark``): the names the file, the ``KAFLEET_*`` variables and the flags share."""
    for name, info in model.model_fields.items():
        nested, _ = nested_model(info.annotation)
        if nested is not None:
            yield from leaf_fields(nested, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


def type_text(annotation: Any) -> str:
    """A field's type in Python's words without ``typing.``: ``int``, ``list[str]``,
    ``str | null`` (a Literal is written as the type of its values: ``choices`` gives them)."""
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


def choices(annotation: Any) -> list[object]:
    """The values a ``Literal`` (or an optional one) allows; [] for any other type."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [v for a in typing.get_args(annotation) for v in choices(a)]


def bounds(info: FieldInfo) -> list[str]:
    """The field's bounds and lengths: ``≥ 1``, ``< 1``, ``length ≤ 255``."""
    return [
        f"{sign} {json.dumps(getattr(meta, attribute))}"
        for meta in info.metadata
        for attribute, sign in _BOUNDS
        if getattr(meta, attribute, None) is not None
    ]


def pattern(info: FieldInfo) -> str | None:
    """The regular expression the field's text must match, if any."""
    found = [getattr(meta, "pattern", None) for meta in info.metadata]
    return next((str(p) for p in found if p is not None), None)


def default(info: FieldInfo) -> object:
    """The field's default (its factory's value), or ``REQUIRED``."""
    if info.default is not PydanticUndefined:
        return info.default
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return REQUIRED


def rows() -> Iterator[list[str]]:
    for dotted, info in leaf_fields():
        allowed, regex, values = bounds(info), pattern(info), choices(info.annotation)
        if regex is not None:
            allowed.append(f"matches `{regex}`")
        if values:
            allowed.append("one of " + ", ".join(f"`{v}`" for v in values))
        kind = type_text(info.annotation)
        if "secret" in kind or (dotted != "kafka" and kind.startswith("dict")):
            flag = "(none: file or environment)"
        else:
            flag = f"`--{dotted}`".replace("_", "-")
        value = default(info)
        shown = "required" if value is REQUIRED else "" if value is None else json.dumps(value)
        yield [f"`{dotted}`", flag, shown, "; ".join(allowed), kind, info.description or ""]


def markdown() -> str:
    head = ["field", "flag", "default", "bounds", "type", "meaning"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
