"""mkdocs-gen-files script: the pages generated at each build, written where the nav expects
them: the reference pages, from the code (the configuration model, the CRD, the metrics, the
command line, the alerts), and the benchmarks' charts page with its SVG charts, from the results
published in ``docs/benchmarks/data/`` (``python -m bench.publish``).

Each page is one function of ``docgen``; this script only writes them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import mkdocs_gen_files

# The repository's root, for ``docgen`` and ``bench`` (mkdocs-gen-files runs this file with
# runpy, which puts nothing on the path; ``python -m mkdocs`` run elsewhere would miss them).
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import publish  # noqa: E402
from docgen import alerts, benchmarks, cli, configuration, crd, metrics  # noqa: E402

REFERENCE: dict[str, Callable[[], str]] = {
    "reference/configuration.md": configuration.build,
    "reference/consumergroup-crd.md": lambda: crd.page(crd.load()),
    "reference/metrics.md": metrics.build,
    "reference/cli.md": cli.build,
    "reference/alerts.md": alerts.build,
}

charts = benchmarks.page(benchmarks.benchmarks(), publish.published())
written = {path: build() for path, build in REFERENCE.items()}
written["benchmarks/charts.md"] = charts.markdown
written |= {f"benchmarks/{name}": text for name, text in charts.files.items()}

for path, text in written.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)
