"""Markdown pieces the generated pages share: a table, a cell, prose, inline code, a literal.

Owns: escaping text taken from the code (descriptions, help texts, annotations) so that it
reads as written: ``<group_id>`` stays visible instead of becoming an HTML tag, a ``*`` does
not start emphasis, a pipe stays in its table cell; code spans in that text (``like this``)
are left as they are. Also inline code that survives backticks in its text, a value written
as it would be in a YAML file, and the anchor a heading gets. Does not know any page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

__all__ = ["anchor", "cell", "code", "literal", "prose", "table"]

# A code span: a run of backticks, anything, the same run again (and not a longer one).
_CODE_SPAN = re.compile(r"(`+).+?(?<!`)\1(?!`)")


def _outside_code(text: str, escape: dict[str, str]) -> str:
    out: list[str] = []
    at = 0
    for span in _CODE_SPAN.finditer(text):
        out += [_replace(text[at : span.start()], escape), span.group(0)]
        at = span.end()
    out.append(_replace(text[at:], escape))
    return "".join(out)


def _replace(text: str, escape: dict[str, str]) -> str:
    return "".join(escape.get(char, char) for char in text)


# A reStructuredText role in a docstring (:func:`load_config`): Markdown keeps the code.
_ROLE = re.compile(r":[a-z]+:(?=`)")
_PROSE = {"<": "&lt;", ">": "&gt;", "*": "\\*", "[": "\\[", "]": "\\]"}


def prose(text: str) -> str:
    """Text from the code as Markdown prose: HTML brackets, stars and square brackets outside
    code spans escaped, reStructuredText roles dropped, lines joined."""
    return _outside_code(_ROLE.sub("", " ".join(text.split())), _PROSE)


def cell(text: str) -> str:
    """Markdown (already escaped) as one table cell: line breaks joined, pipes outside code
    spans escaped (inside one a pipe is part of the code)."""
    return _outside_code(" ".join(text.split()), {"|": "\\|"})


def code(text: str) -> str:
    """``text`` as inline code, with a fence longer than any run of backticks inside it."""
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def literal(value: object) -> str:
    """A default or a bound as it would be written in a YAML file: ``true``, ``"earliest"``,
    ``[]``; ``None`` as ``null``."""
    return json.dumps(value, ensure_ascii=False)


def anchor(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` gives a heading of this text (its words, lower
    case, joined by dashes): ``spec.queue`` -> ``specqueue``, ``KafleetLagHigh`` ->
    ``kafleetlaghigh``."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of Markdown cells (each passed through :func:`cell`)."""
    lines = [
        "| " + " | ".join(cell(h) for h in head) + " |",
        "|" + " --- |" * len(head),
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
