"""Publishing benchmark results copies them, checked, into the documentation's data folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import publish

TABLE: dict[str, Any] = {
    "name": "b1",
    "title": "overhead",
    "columns": ["consumer", "records/s"],
    "rows": [["raw", 100000.0]],
    "notes": [],
    "machine": "2 cores",
    "at": "2026-11-01T10:00:00Z",
}


def write(folder: Path, name: str, data: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_chosen_results_are_copied_as_they_are(tmp_path: Path) -> None:
    source = write(tmp_path / "results", "b1", TABLE)
    write(tmp_path / "results", "b2", {**TABLE, "name": "b2"})

    written = publish.publish(["b1"], tmp_path / "results", tmp_path / "data")

    assert written == [tmp_path / "data" / "b1.json"]
    assert written[0].read_bytes() == source.read_bytes()


def test_with_no_names_every_result_is_published_but_not_the_side_files(tmp_path: Path) -> None:
    write(tmp_path / "results", "b1", TABLE)
    write(tmp_path / "results", "b9-samples", {"raw": []})

    written = publish.publish([], tmp_path / "results", tmp_path / "data")

    assert [p.name for p in written] == ["b1.json"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({**TABLE, "rows": [["raw"]]}, "row 0 does not have the 2 columns"),
        ({**TABLE, "name": "b2"}, "name 'b2' is not the file's"),
        ({k: v for k, v in TABLE.items() if k != "at"}, "at is missing"),
        (["not", "a", "table"], "not a benchmark's table"),
    ],
)
def test_a_broken_result_is_refused_naming_the_problem_and_nothing_is_written(
    tmp_path: Path, data: object, reason: str
) -> None:
    write(tmp_path / "results", "b1", data)

    with pytest.raises(ValueError, match=reason):
        publish.publish(["b1"], tmp_path / "results", tmp_path / "data")

    assert not (tmp_path / "data").exists()


def test_the_published_results_read_back_by_number(tmp_path: Path) -> None:
    for n in (10, 2):
        write(tmp_path, f"b{n}", {**TABLE, "name": f"b{n}", "commit": "abc"})

    found = publish.published(tmp_path)

    assert [r.name for r in found] == ["b2", "b10"]
    assert found[0].commit == "abc"


def test_every_result_in_the_documentation_is_well_formed() -> None:
    found = publish.published()

    assert {r.name for r in found} >= {"b9", "b11"}
