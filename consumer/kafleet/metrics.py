"""``python -m kafleet.metrics``, the command README gave before the packages: the same as
``python -m kafleet.sidecar.metrics`` (the metrics' reference table). Nothing imports it."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kafleet.sidecar.metrics", run_name="__main__")
