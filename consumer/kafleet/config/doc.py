"""The configuration's field names, and its reference as a Markdown table.

Owns: ``leaf_fields``, the dotted names of every leaf field of ``ConsumerConfig`` (the names
the file, the ``KAFLEET_*`` variables and ``kafleet worker``'s flags share), and the table made
from them, which ``python -m kafleet.config.doc`` prints. The documentation site's Configuration
page is generated from the same model at each build (``docgen/configuration.py``).
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kafleet.config.model import ConsumerConfig


def leaf_fields(
    model: type[BaseModel] = ConsumerConfig, prefix: str = ""
) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted name, field) of every leaf field, into nested models (optional ones too, such
    as ``spark``): the names the file, the ``KAFLEET_*`` variables and the flags share."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1 and isinstance(inner[0], type):  # SparkSettings | None
            annotation = inner[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from leaf_fields(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info


def rows() -> Iterator[list[str]]:
    for dotted, info in leaf_fields():
        annotation = info.annotation
        if info.default is not PydanticUndefined:
            default = "" if info.default is None else repr(info.default)
        elif info.default_factory is not None:
            default = repr(info.default_factory())  # type: ignore[call-arg]
        else:
            default = "required"
        bounds = [
            f"{kind} {getattr(m, kind)}"
            for m in info.metadata
            for kind in ("ge", "gt", "le", "lt")
            if getattr(m, kind, None) is not None
        ]
        kind = str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
        if "SecretStr" in kind or (dotted != "kafka" and kind.startswith("dict")):
            flag = "(none: file or environment)"
        else:
            flag = f"`--{dotted}`".replace("_", "-")
        yield [f"`{dotted}`", flag, default, ", ".join(bounds), kind, info.description or ""]


def markdown() -> str:
    head = ["field", "flag", "default", "bounds", "type", "meaning"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
