"""The benchmarks' charts page, drawn at each build from the published results.

Owns: which figures of a benchmark's table are drawn (``CHARTS``: a column, one bar per row,
or, for a table whose columns are the configurations compared, such as B9's, a row, one bar
per column), the charts of a table with no entry there (one per numeric column), the bars of a
chart (``bars``), and the page: per benchmark, its charts, each with a line naming the run it
comes from (the file, when, the commit if recorded, the machine), the table itself and its
notes; or, for a benchmark with no published result, a line saying so. ``page()`` returns the
Markdown and the SVG files it links to.

Does not own the results or publishing them (``bench/publish.py``: ``docs/benchmarks/data/``),
running benchmarks (``bench/``), or drawing a chart (``svg.py``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

import bench
from bench.publish import Result
from docgen import markdown, svg

__all__ = ["CHARTS", "Chart", "Page", "bars", "benchmarks", "charts_of", "page"]

# Where the SVG files go, beside the page (benchmarks/charts.md).
IMAGES = "img"


@dataclass(frozen=True)
class Chart:
    """One chart of a benchmark's table."""

    figure: str  # the column (or, across columns, the row) whose values are drawn
    unit: str = ""
    # The figure is a row (its first cell) and each column after the first is a bar, but those
    # whose name holds " / " (ratios of other columns): B9's columns are configurations.
    across_columns: bool = False


# The figures worth a chart, per benchmark; any other benchmark gets one per numeric column.
CHARTS: dict[str, tuple[Chart, ...]] = {
    "b9": (
        Chart("settle s (apply -> all Ready)", "s", across_columns=True),
        Chart("step -> 8 replicas s, p99", "s", across_columns=True),
        Chart("CPU ms per group per tick", "ms", across_columns=True),
        Chart("peak RSS MiB, largest process", "MiB", across_columns=True),
        Chart("peak RSS MiB, all processes", "MiB", across_columns=True),
        Chart("Kafka requests per tick", across_columns=True),
        Chart("apiserver requests/min at rest", across_columns=True),
    ),
    "b11": (
        Chart("longest stall s", "s"),
        Chart("settled after s", "s"),
        Chart("during / steady"),
        Chart("handled twice", "records"),
    ),
}

# The hand-written page of each benchmark, from this one.
PAGES = {
    **dict.fromkeys(("b0", "b1", "b2", "b3", "b4"), "consumer.md"),
    **dict.fromkeys(("b5", "b7"), "spark.md"),
    "b6": "rebalances.md",
    "b8": "autopilot.md",
    "b9": "fleet-scale.md",
    "b10": "share-groups.md",
    "b11": "cluster-faults.md",
}


def _figure(cell: object) -> float | None:
    """A cell as a figure; None for text ("-", "" or words)."""
    if isinstance(cell, bool) or not isinstance(cell, int | float):
        return None
    return float(cell)


def _labels(result: Result) -> int:
    """How many leading columns label the rows (text in every row)."""
    count = 0
    for n in range(len(result.columns)):
        if any(_figure(row[n]) is not None for row in result.rows):
            break
        count += 1
    return count


def charts_of(result: Result) -> tuple[Chart, ...]:
    """The charts of a result: its entry in ``CHARTS``, else one per column of figures."""
    if result.name in CHARTS:
        return CHARTS[result.name]
    first = _labels(result)
    return tuple(Chart(c) for c in result.columns[first:])


def bars(result: Result, chart: Chart) -> list[svg.Bar] | None:
    """The bars of one chart of a result; None if the table has no such figure."""
    if chart.across_columns:
        row = next((r for r in result.rows if str(r[0]).strip() == chart.figure), None)
        if row is None:
            return None
        return [
            svg.Bar("", name, _figure(cell))
            for name, cell in zip(result.columns[1:], row[1:], strict=True)
            if " / " not in name
        ]
    if chart.figure not in result.columns:
        return None
    at = result.columns.index(chart.figure)
    first = _labels(result)
    found = []
    for row in result.rows:
        words = [str(c) for c in row[:first]]
        group, label = (words[0], " · ".join(words[1:])) if first > 1 else ("", " · ".join(words))
        found.append(svg.Bar(group, label, _figure(row[at])))
    order = list(dict.fromkeys(b.group for b in found))  # rows of a group together, in order
    return sorted(found, key=lambda b: order.index(b.group))


@dataclass(frozen=True)
class Benchmark:
    """A benchmark of ``bench/``: ``b9`` and the first sentence of its module's docstring."""

    name: str
    about: str


def benchmarks() -> list[Benchmark]:
    """Every benchmark module of ``bench/`` (``bench.modules()``), by number, read without
    importing it (they import Kafka's client and the test bed)."""
    found = []
    for path in bench.modules():
        doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
        found.append(Benchmark(path.stem.split("_", 1)[0], re.split(r"(?<=\.)\s", doc)[0]))
    return found


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def run_line(result: Result) -> str:
    """Which run a chart comes from: the file, when, and the commit if the run recorded it."""
    when = result.at.replace("T", " ").removesuffix("Z") + " UTC"
    commit = f", commit `{result.commit}`" if result.commit else ""
    return f"From [`{result.path.name}`](data/{result.path.name}), the run of {when}{commit}."


def _cell(value: object) -> str:
    figure = _figure(value)
    return svg.number(figure) if figure is not None else markdown.prose(str(value))


def _result_section(result: Result, files: dict[str, str]) -> list[str]:
    machine = f", on {markdown.prose(result.machine)}" if result.machine else ""
    parts = [f"The published run: {markdown.prose(result.title)}{machine}.\n"]
    for chart in charts_of(result):
        found = bars(result, chart)
        if found is None or all(b.value is None for b in found):
            parts.append(f"No figure {markdown.code(chart.figure)} in this run.\n")
            continue
        name = f"{IMAGES}/{result.name}-{_slug(chart.figure)}.svg"
        files[name] = svg.bar_chart(chart.figure, found, chart.unit)
        parts.append(f"![{markdown.prose(chart.figure)}]({name})\n")
        parts.append(f"<small>{run_line(result)}</small>\n")
    table = markdown.table(
        result.columns, [[_cell(c) for c in row] for row in result.rows]
    ).replace("\n", "\n    ")
    notes = "".join(f"    - {markdown.prose(n)}\n" for n in result.notes)
    parts.append(f'??? note "The table, and its notes"\n\n    {table}\n{notes}')
    return parts


INTRO = """\
# Charts

The benchmarks' latest published results, drawn at each build of this site from the JSON in
`docs/benchmarks/data/`: a run of `make bench` (`python -m bench [NAME ...]`) writes
`bench/results/<name>.json` (not committed), and `make bench-publish` (`python -m bench.publish
[NAME ...]`) copies the chosen ones into `docs/benchmarks/data/`, where they are committed. Each
chart says which run it comes from. What each benchmark measures, and why: its own page.
"""


@dataclass(frozen=True)
class Page:
    """The page's Markdown, and the files it links to (path under the page's folder: SVG)."""

    markdown: str
    files: dict[str, str]


def page(known: Sequence[Benchmark], results: Sequence[Result]) -> Page:
    """The charts page: every benchmark of ``known`` and of ``results``, by number."""
    by_name = {r.name: r for r in results}
    about = {b.name: b.about for b in known}
    names = sorted({*about, *by_name}, key=bench.number)
    parts = [INTRO]
    files: dict[str, str] = {}
    for name in names:
        parts.append(f"## {name.upper()}\n")
        lines = [markdown.prose(about[name])] if about.get(name) else []
        if name in PAGES:
            lines.append(f"See [its page]({PAGES[name]}).")
        if lines:
            parts.append(" ".join(lines) + "\n")
        result = by_name.get(name)
        if result is None:
            parts.append("No result published yet.\n")
        else:
            parts += _result_section(result, files)
    return Page("\n".join(parts), files)
