"""kafleet's benchmarks: ``make bench`` (``python -m bench [NAME ...]``).

Each benchmark is a module ``bench/b<N>_<name>.py`` with ``run(ctx) -> Table``. The runner
starts one broker for the whole run, runs the benchmarks side by side in that one process tree,
prints each table (rates and ratios) and writes it as JSON to ``bench/results/``. Speed is
measured here and never asserted in tests.
"""
