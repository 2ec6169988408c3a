"""A real Prometheus for the tests: Debian's ``prometheus`` package, scraping what a test names,
and the same Prometheus built from its Go module for discovering pods through the apiserver.

Owns: installing the package when it is missing (``apt-get``, as CI runs as root); building
``prometheus`` with Kubernetes service discovery (``k8s_sd_binary``): Debian builds its package
without it (``kubernetes_sd_configs`` is "field not found" there), so it is built from the Go
module proxy at a pinned version with Prometheus' own build tags keeping only that discovery
(``remove_all_sd,enable_kubernetes_sd``: minutes, not the quarter hour of every plugin), into
``.cache/prometheus/<version>/``; the Prometheus Operator's CRDs (``operator_crds``: its
ServiceMonitor, PodMonitor and PrometheusRule, for the chart's objects to be judged by a real
apiserver), from its Go module, which carries them; starting a server with a scrape
configuration (static targets, or scrape configs given whole) on a free loopback port and its
data under ``.cache/prometheus/``, waiting until it is ready, PromQL queries through its HTTP
API, and stopping it by its pid. Does not own what it scrapes.

    python -m tests.infra.prometheus install   # what `make test` runs first (all three)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra import apt, processes
from tests.infra.kafka import LOOPBACK, REPO_ROOT, TestbedError
from tests.infra.ports import free_port

CACHE = REPO_ROOT / ".cache" / "prometheus"
# Prometheus 3.16.0 as a Go module (Prometheus 3 tags its module v0.3xx.y).
K8S_SD_VERSION = "v0.316.0"
K8S_SD_TAGS = "remove_all_sd,enable_kubernetes_sd"
# The Prometheus Operator whose CRDs the chart's ServiceMonitors and PrometheusRule are checked
# against (its module holds them under example/prometheus-operator-crd/).
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.89.0"
OPERATOR_CRDS = ("servicemonitors", "podmonitors", "prometheusrules")


def binary() -> str:
    """The prometheus binary, installed from Debian's packages if it is not there yet."""
    found = shutil.which("prometheus")
    if found:
        return found
    apt.install(["prometheus"], "the test bed's Prometheus ('prometheus' is not on PATH)")
    found = shutil.which("prometheus")
    if found is None:
        raise TestbedError("apt-get installed prometheus, yet it is not on PATH")
    return found


def promtool() -> str:
    """Prometheus' ``promtool`` (``check metrics`` lints an exposition), from the same package."""
    found = shutil.which("promtool")
    if found is None:
        binary()  # installs the package, which carries promtool
        found = shutil.which("promtool")
    if found is None:
        raise TestbedError("the prometheus package is installed, yet promtool is not on PATH")
    return found


def k8s_sd_binary(log: bool = True) -> str:
    """Prometheus with Kubernetes service discovery, built once from the Go module proxy."""
    from tests.infra import k8s_build

    folder = CACHE / K8S_SD_VERSION
    built = folder / "prometheus"
    if built.exists():
        return str(built)
    env = {**k8s_build.go_env(), "GOBIN": str(folder / "partial")}
    started = time.monotonic()
    if log:
        print(f"building prometheus {K8S_SD_VERSION} with Kubernetes discovery", file=sys.stderr)
    done = subprocess.run(
        ["go", "install", "-trimpath", "-ldflags=-s -w", f"-tags={K8S_SD_TAGS}",
         f"github.com/prometheus/prometheus/cmd/prometheus@{K8S_SD_VERSION}"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise TestbedError(f"building prometheus failed:\n{done.stderr[-3000:]}")
    (folder / "partial" / "prometheus").rename(built)
    (folder / "partial").rmdir()
    if log:
        print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return str(built)


def operator_crds() -> list[Path]:
    """The Prometheus Operator's CRD files, fetched once with ``go mod download``."""
    from tests.infra import k8s_build

    folder = CACHE / f"operator-crds-{OPERATOR_VERSION}"
    files = [folder / f"monitoring.coreos.com_{name}.yaml" for name in OPERATOR_CRDS]
    if all(f.exists() for f in files):
        return files
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{OPERATOR_MODULE}@{OPERATOR_VERSION}"],
        env=k8s_build.go_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise TestbedError(
            f"fetching {OPERATOR_MODULE}@{OPERATOR_VERSION} failed:\n{done.stdout}{done.stderr}"
        )
    source = Path(json.loads(done.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copyfile(source / f.name, f)
    return files


@dataclass
class Prometheus:
    workdir: Path
    port: int
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(
        self,
        targets: list[str],
        timeout: float = 60.0,
        scrape_configs: list[dict[str, Any]] | None = None,
        program: str | None = None,
        rule_files: list[Path] | None = None,
    ) -> None:
        """Scrape ``targets`` every second, or ``scrape_configs`` as given, with ``program``
        (default: Debian's), evaluating the rules of ``rule_files`` every second."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        static = [{"job_name": "kafleet", "static_configs": [{"targets": targets}]}]
        config.write_text(json.dumps({  # JSON is YAML too
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs or static,
            "rule_files": [str(f) for f in rule_files or []],
        }))  # fmt: skip
        self.pid = processes.spawn(
            [program or binary(), f"--config.file={config}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address={LOOPBACK}:{self.port}", "--log.level=warn"],
            self.workdir / "prometheus.log",
        )  # fmt: skip

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)

        why = processes.wait_started(self.pid, self.workdir / "prometheus.log", ready, timeout)
        if why:
            raise TestbedError(f"prometheus on {self.url} {why}")

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise TestbedError(f"{path} {params} failed: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, object]]:
        """The result vector of an instant PromQL query."""
        result: list[dict[str, object]] = self._get("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, seconds: int, step_s: int) -> list[dict[str, object]]:
        """The result matrix of a range query over the last ``seconds`` (as a panel asks)."""
        end = time.time()
        result: list[dict[str, object]] = self._get(
            "query_range", query=expr, start=str(end - seconds), end=str(end), step=str(step_s)
        )["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """The values ``label`` takes in the series ``match`` selects (what Grafana's
        ``label_values(match, label)`` variable query asks)."""
        found: list[str] = self._get(f"label/{label}/values", **{"match[]": match})
        return found

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its health and last error."""
        groups = self._get("rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def targets(self) -> list[dict[str, Any]]:
        """The active targets: their labels (after relabelling), ``health`` and last error."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as response:
            body = json.loads(response.read())
        found: list[dict[str, Any]] = body["data"]["activeTargets"]
        return found

    def stop(self) -> None:
        processes.stop(self.pid, timeout=10)
        self.pid = None


def start_prometheus(
    workdir: Path,
    targets: list[str],
    scrape_configs: list[dict[str, Any]] | None = None,
    program: str | None = None,
    rule_files: list[Path] | None = None,
) -> Prometheus:
    shutil.rmtree(workdir, ignore_errors=True)
    server = Prometheus(workdir, free_port())
    server.start(targets, scrape_configs=scrape_configs, program=program, rule_files=rule_files)
    return server


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print("usage: python -m tests.infra.prometheus install", file=sys.stderr)
        sys.exit(2)
    try:
        print(binary())
        print(k8s_sd_binary())
        print(*operator_crds(), sep="\n")
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
