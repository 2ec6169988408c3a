"""mkdocs-gen-files script: the benchmarks' charts page and its SVG charts, drawn at each build
from the results published in ``docs/benchmarks/data/`` (``python -m bench.publish``).

The page and the charts are ``docgen.benchmarks``'s; this script only writes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

# The repository's root, for ``docgen`` and ``bench`` (see reference.py).
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import publish  # noqa: E402
from docgen import benchmarks  # noqa: E402

made = benchmarks.page(benchmarks.benchmarks(), publish.published())
with mkdocs_gen_files.open("benchmarks/charts.md", "w") as page:
    page.write(made.markdown)
for name, text in made.files.items():
    with mkdocs_gen_files.open(f"benchmarks/{name}", "w") as chart:
        chart.write(text)
