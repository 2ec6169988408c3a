"""The benchmark harness: a context with a broker, and the tables that benchmarks return.

Owns: the broker for a run, table rendering (text for people, JSON for comparing runs) and the
description of the machine a run happened on. Does not own any benchmark's workload.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Context:
    bootstrap: str
    quick: bool = False  # smaller workloads, for checking that a benchmark runs at all

    def scale(self, full: int, quick: int) -> int:
        return quick if self.quick else full


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *row: object) -> None:
        self.rows.append(list(row))

    def render(self) -> str:
        cells = [[_fmt(c) for c in row] for row in [self.columns, *self.rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [f"{self.name}: {self.title}"]
        for n, row in enumerate(cells):
            lines.append(
                "  "
                + "  ".join(
                    c.rjust(w) if n and i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
            if n == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        path.write_text(
            json.dumps(
                {
                    **asdict(self),
                    "machine": machine(),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=2,
            )
        )
        return path


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )
