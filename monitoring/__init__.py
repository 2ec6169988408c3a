"""kafleet's Grafana dashboards, as code: built with Grafana's own SDK (``grafana-foundation-sdk``)
and written as JSON into the chart (``charts/kafleet/dashboards/``), where the chart's
ConfigMaps carry them to Grafana's sidecar.

``python -m monitoring`` writes the files; ``python -m monitoring --check`` fails if a committed
file differs from what the code builds. The alerts are not here: they are a Prometheus rule
file in the chart (``charts/kafleet/rules/``), tested with ``promtool test rules``.
"""
