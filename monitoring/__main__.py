"""``python -m monitoring``: write the dashboards' JSON into the chart; ``--check``: exit 1,
naming the files, if the committed ones differ from what the code builds (CI runs it)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from monitoring import fleet, workers

DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "kafleet-fleet.json": fleet.build,
    "kafleet-workers.json": workers.build,
}
FOLDER = Path(__file__).resolve().parent.parent / "charts" / "kafleet" / "dashboards"


def render(build: Callable[[], Dashboard]) -> str:
    """A dashboard as the chart holds it: panels numbered in order (Grafana wants unique ids),
    keys sorted, so a change in the code is a readable change in the file."""
    board = build()
    for number, panel in enumerate(board.panels or [], start=1):
        panel.id_val = number
    return json.dumps(board, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitoring", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path, text = FOLDER / name, render(build)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(path)
    if stale:
        print(f"out of date (run `python -m monitoring`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
