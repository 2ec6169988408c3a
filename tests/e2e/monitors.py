"""The scrape configuration the Prometheus Operator generates for a ServiceMonitor, so that the
test bed's Prometheus (no Prometheus Operator runs here) scrapes the fleet as the chart's
ServiceMonitors would have a cluster's Prometheus scrape it, labels included.

A transcription of ``generateServiceMonitorConfig`` in prometheus-operator v0.89.0
(``pkg/prometheus/promcfg.go``), for the parts the chart uses, with a Prometheus resource's
defaults: the endpoints role (``serviceDiscoveryRole: EndpointSlice`` swaps the meta labels'
prefix, not the labels made), the selector's ``matchLabels`` as keep rules, the named port, the
target labels it always sets (``namespace``, ``service``, ``pod``, ``container``, ``job``,
``endpoint``), the running-pod filter, then the endpoint's own relabelings; ``honorLabels``,
path. Not transcribed, since the chart's monitors use none: scrape classes, TLS and
authorization, sharding, limits; nor a Prometheus resource's ``overrideHonorLabels`` or
``enforcedNamespaceLabel``, which rewrite the operator's ``namespace`` label (the README warns).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

META = "__meta_kubernetes_"


def _sanitized(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _relabeling(rule: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor's relabeling (camelCase) as Prometheus writes it (snake_case)."""
    return {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): v for k, v in rule.items()}


def scrape_config(
    monitor: dict[str, Any], index: int, kubeconfig: Path, interval: str
) -> dict[str, Any]:
    """The job for endpoint ``index`` of ``monitor`` (a ServiceMonitor as the apiserver holds
    it), discovering through ``kubeconfig`` and scraping every ``interval`` (the test's pace,
    not the chart's)."""
    meta, spec = monitor["metadata"], monitor["spec"]
    endpoint = spec["endpoints"][index]
    selector = spec.get("namespaceSelector", {})
    sd: dict[str, Any] = {"role": "endpoints", "kubeconfig_file": str(kubeconfig)}
    if not selector.get("any"):
        sd["namespaces"] = {"names": selector.get("matchNames") or [meta["namespace"]]}
    keep = [
        {
            "action": "keep",
            "source_labels": [
                f"{META}service_label_{_sanitized(k)}",
                f"{META}service_labelpresent_{_sanitized(k)}",
            ],
            "regex": f"({v});true",
        }
        for k, v in sorted(spec["selector"].get("matchLabels", {}).items())
    ]
    target = [f"{META}endpoint_address_target_kind", f"{META}endpoint_address_target_name"]
    relabel_configs = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        *keep,
        {
            "action": "keep",
            "source_labels": [f"{META}endpoint_port_name"],
            "regex": endpoint["port"],
        },
        {"source_labels": target, "separator": ";", "regex": "Node;(.*)",
         "replacement": "${1}", "target_label": "node"},
        {"source_labels": target, "separator": ";", "regex": "Pod;(.*)",
         "replacement": "${1}", "target_label": "pod"},
        {"source_labels": [f"{META}namespace"], "target_label": "namespace"},
        {"source_labels": [f"{META}service_name"], "target_label": "service"},
        {"source_labels": [f"{META}pod_name"], "target_label": "pod"},
        {"source_labels": [f"{META}pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": [f"{META}pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": [f"{META}service_name"], "target_label": "job",
         "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
        *(_relabeling(r) for r in endpoint.get("relabelings", [])),
    ]  # fmt: skip
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "kubernetes_sd_configs": [sd],
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "relabel_configs": relabel_configs,
    }


def scrape_configs(monitors: list[dict[str, Any]], kubeconfig: Path, interval: str) -> list[Any]:
    return [
        scrape_config(m, i, kubeconfig, interval)
        for m in monitors
        for i in range(len(m["spec"]["endpoints"]))
    ]
