"""``python -m bench.publish [NAME ...]``: publish benchmark results to the documentation.

Owns: the folder of published results (``DATA``, ``docs/benchmarks/data/``, committed, so the
site's charts are built from a clean clone), the shape of a result as the harness writes it
(``Result``: ``bench/results/<name>.json``, a ``Table`` with the machine, the time and, since
the harness records it, the commit), reading and checking one (``read``), and copying the chosen
ones, checked, into ``DATA`` (``publish``). With no names, every ``b<N>.json`` of the results
folder is published (``b9-samples.json`` and other side files are not).

Does not run benchmarks (``bench/__main__.py``) or draw their charts (``docgen/benchmarks.py``,
at each build of the site). Loads nothing of kafleet or Kafka: the docs build imports it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench

__all__ = ["DATA", "RESULTS", "Result", "publish", "published", "read"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DATA = ROOT / "docs" / "benchmarks" / "data"
# A benchmark's own result: b0.json ... b11.json (not b9-samples.json).
NAME = re.compile(r"^b\d+$")


@dataclass(frozen=True)
class Result:
    """One benchmark's table as the harness saved it."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str]
    machine: str
    at: str  # UTC, 2026-11-28T16:34:22Z
    commit: str | None  # git describe of the code that ran, if the harness recorded it
    path: Path


def read(path: Path) -> Result:
    """A result file, checked; ValueError names the file and what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON: {exc}") from exc
    problems = []
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a benchmark's table (a JSON object)")
    for key, kind in (("name", str), ("title", str), ("columns", list), ("rows", list),
                      ("at", str)):  # fmt: skip
        if not isinstance(data.get(key), kind):
            problems.append(f"{key} is missing or not a {kind.__name__}")
    if not problems:
        if data["name"] != path.stem:
            problems.append(f"name {data['name']!r} is not the file's")
        width = len(data["columns"])
        for n, row in enumerate(data["rows"]):
            if not isinstance(row, list) or len(row) != width:
                problems.append(f"row {n} does not have the {width} columns")
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems)}")
    commit = data.get("commit")
    return Result(
        name=data["name"],
        title=data["title"],
        columns=[str(c) for c in data["columns"]],
        rows=data["rows"],
        notes=[str(n) for n in data.get("notes") or []],
        machine=str(data.get("machine", "")),
        at=data["at"],
        commit=str(commit) if commit else None,
        path=path,
    )


def _results(folder: Path) -> list[Path]:
    """The benchmarks' own results in ``folder`` (``b<N>.json``), by benchmark number."""
    paths = [p for p in folder.glob("b*.json") if NAME.match(p.stem)]
    return sorted(paths, key=lambda p: bench.number(p.stem))


def published(folder: Path = DATA) -> list[Result]:
    """Every result published in ``folder``, by benchmark number."""
    return [read(p) for p in _results(folder)]


def publish(names: Sequence[str], source: Path = RESULTS, target: Path = DATA) -> list[Path]:
    """Copy ``<source>/<name>.json`` of each name (every ``b<N>.json`` if none), checked, into
    ``target``, as it is; returns the files written. Nothing is written if one is not right."""
    if names:
        bad = [n for n in names if not NAME.match(n)]
        if bad:
            raise ValueError(f"not a benchmark's name (b0, b1, ...): {', '.join(bad)}")
        paths = [source / f"{n}.json" for n in names]
    else:
        paths = _results(source)
        if not paths:
            raise ValueError(f"{source}: no results (b<N>.json) to publish")
    for path in paths:
        read(path)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        (target / path.name).write_bytes(path.read_bytes())
        written.append(target / path.name)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to publish: b9 b11 (default: all)")
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="where the results are (bench/results)"
    )
    args = parser.parse_args(argv)
    try:
        written = publish(args.names, args.results)
    except ValueError as exc:
        print(f"python -m bench.publish: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
