"""kafleet's benchmarks: ``make bench`` (``python -m bench [NAME ...]``).

Each benchmark is a module ``bench/b<N>_<name>.py`` with ``run(ctx) -> Table``. The runner
starts one broker for the whole run, runs the benchmarks side by side in that one process tree,
prints each table (rates and ratios) and writes it as JSON to ``bench/results/``. Speed is
measured here and never asserted in tests.

``modules()`` finds the benchmarks (for the runner and for the site's charts page); this package
imports nothing else, so the docs build can read it without Kafka's client.
"""

from __future__ import annotations

from pathlib import Path


def number(name: str) -> int:
    """A benchmark's number, from its name or its module's: ``b10`` or ``b10_share`` -> 10."""
    return int(name[1:].split("_", 1)[0])


def modules() -> list[Path]:
    """Every benchmark's module, ``bench/b<N>_<name>.py``, by number."""
    return sorted(
        Path(__file__).resolve().parent.glob("b[0-9]*_*.py"), key=lambda p: number(p.stem)
    )
