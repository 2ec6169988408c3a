"""The charts page draws every published result, says which run each chart comes from, and
says so of a benchmark with nothing published; its charts are well-formed SVG, the same for the
same figures."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench import publish
from docgen import benchmarks, svg
from tests.docs.pages import section


def result(tmp_path: Path, name: str = "b3", **changes: Any) -> publish.Result:
    data: dict[str, Any] = {
        "name": name,
        "title": "ordering against the published figures",
        "columns": ["ordering", "kafleet s", "published s", "note"],
        "rows": [["key", 2.5, 2.06, "ok"], ["partition", 24.0, 22.2, "-"]],
        "notes": ["one note"],
        "machine": "2 cores",
        "at": "2026-11-01T10:00:00Z",
        **changes,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return publish.read(path)


def test_the_page_names_each_published_result_and_the_run_of_each_chart() -> None:
    published = publish.published()
    made = benchmarks.page(benchmarks.benchmarks(), published)

    assert {r.name for r in published} >= {"b9", "b11"}
    for found in published:
        under = section(made.markdown, f"## {found.name.upper()}")
        charts = under.count("![")
        assert 0 < charts == len(benchmarks.charts_of(found)), found.name
        when = found.at.replace("T", " ").removesuffix("Z")
        assert under.count(f"[`{found.name}.json`](data/{found.name}.json)") == charts
        assert under.count(f"the run of {when} UTC") == charts


def test_every_benchmark_has_a_section_and_one_with_nothing_published_says_so() -> None:
    known = benchmarks.benchmarks()
    made = benchmarks.page(known, [])

    assert [b.name for b in known][:3] == ["b0", "b1", "b2"]
    for found in known:
        assert "No result published yet." in section(made.markdown, f"## {found.name.upper()}")
    assert made.files == {}


def test_each_chart_the_page_shows_is_a_file_it_writes() -> None:
    made = benchmarks.page(benchmarks.benchmarks(), publish.published())

    assert made.files
    for name in made.files:
        assert f"]({name})" in made.markdown
        ET.fromstring(made.files[name])


def test_a_table_of_configurations_is_drawn_across_its_columns_without_the_ratios() -> None:
    b9 = next(r for r in publish.published() if r.name == "b9")

    bars = benchmarks.bars(b9, benchmarks.Chart("settle s (apply -> all Ready)", "s", True))

    assert bars is not None
    assert [b.label for b in bars] == [c for c in b9.columns[1:] if " / " not in c]
    assert all(b.value is not None and b.value > 0 for b in bars)


def test_a_table_with_no_entry_gets_a_chart_per_column_of_figures(tmp_path: Path) -> None:
    found = result(tmp_path)

    charts = benchmarks.charts_of(found)
    bars = benchmarks.bars(found, charts[0])

    assert [c.figure for c in charts] == ["kafleet s", "published s", "note"]
    assert bars == [svg.Bar("", "key", 2.5), svg.Bar("", "partition", 24.0)]
    assert "No figure `note` in this run." in benchmarks.page([], [found]).markdown


def test_the_commit_is_named_when_the_run_recorded_it(tmp_path: Path) -> None:
    found = result(tmp_path, commit="0123456789ab")

    assert "commit `0123456789ab`" in benchmarks.run_line(found)
    assert "commit" not in benchmarks.run_line(result(tmp_path))


def test_rows_of_a_group_are_drawn_together_under_its_heading(tmp_path: Path) -> None:
    found = result(
        tmp_path,
        columns=["fault", "consumer", "stall s"],
        rows=[["bounce", "a", 1.0], ["kill", "a", 8.0], ["bounce", "b", 1.5]],
    )

    bars = benchmarks.bars(found, benchmarks.Chart("stall s"))

    assert bars is not None
    assert [(b.group, b.label) for b in bars] == [("bounce", "a"), ("bounce", "b"), ("kill", "a")]


def test_a_chart_is_the_same_svg_for_the_same_bars_and_escapes_its_text() -> None:
    bars = [svg.Bar("g <1>", "a & b", 3.0), svg.Bar("g <1>", "c", None)]

    drawn = svg.bar_chart("t -> u", bars, "s")

    assert drawn == svg.bar_chart("t -> u", bars, "s")
    root = ET.fromstring(drawn)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {"t -> u", "g <1>", "a & b", "3 s", "no figure"} <= set(texts)
