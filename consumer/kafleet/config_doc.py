"""The configuration reference as a Markdown table, made from ``ConsumerConfig`` itself.

``python -m kafleet.config_doc`` prints it; README.md holds a copy, and a test checks that
every field is there. Owns nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic_core import PydanticUndefined

from kafleet.config import leaf_fields


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
