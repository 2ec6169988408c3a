"""The documentation site's generated pages: Markdown made from the code where the code is the
truth, so that the reference never drifts from what runs.

Owns: one module per page, each a pure function from its source to Markdown: the worker's
configuration (``configuration.py``, from the pydantic model and the worker's flags), the
ConsumerGroup CRD (``crd.py``, from ``crds/``), the metrics (``metrics.py``, from the sidecar's
catalogue and the operator's registry), the command line (``cli.py``, from the argparse
parser), the alerts (``alerts.py``, from the chart's rule file) and the benchmarks' charts
(``benchmarks.py`` with ``svg.py``, from the results published in ``docs/benchmarks/data/``);
``markdown.py`` holds the table and cell helpers they share.

Does not own writing the site: ``docs/gen/pages.py`` is the mkdocs-gen-files script that calls
these at each build (``make docs``), and the hand-written pages are in ``docs/``. Publishing
benchmark results is ``bench/publish.py``'s.
"""
