"""Reading a generated page back: its sections and the rows of their tables."""

from __future__ import annotations

import re


def section(page: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line, such as "## `spec`") up to the next
    heading of the same level or above."""
    level = heading.split(" ", 1)[0]
    lines = page.splitlines()
    start = lines.index(heading)
    end = next(
        (n for n in range(start + 1, len(lines)) if re.match(rf"^#{{1,{len(level)}}} ", lines[n])),
        len(lines),
    )
    return "\n".join(lines[start + 1 : end])


def row(text: str, first_cell: str) -> str:
    """The table row of ``text`` whose first cell is ``first_cell``; AssertionError if none."""
    for line in text.splitlines():
        if line.startswith(f"| {first_cell} |") or line.startswith(f"| {first_cell} ("):
            return line
    raise AssertionError(f"no row {first_cell} in:\n{text[:400]}")
