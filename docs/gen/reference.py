"""mkdocs-gen-files script: the reference pages, generated from the code at each build.

Each page is one function of ``docgen`` (the configuration model, the CRD, the metrics, the
command line, the alerts); this script only writes them where the site's nav expects them.
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

from docgen import alerts, cli, configuration, crd, metrics  # noqa: E402

PAGES: dict[str, Callable[[], str]] = {
    "reference/configuration.md": configuration.build,
    "reference/consumergroup-crd.md": lambda: crd.page(crd.load()),
    "reference/metrics.md": metrics.build,
    "reference/cli.md": cli.build,
    "reference/alerts.md": alerts.build,
}

for path, build in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(build())
