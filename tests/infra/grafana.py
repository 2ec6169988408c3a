"""A real Grafana for the tests: its backend built from the Go module proxy, serving the chart's
dashboards and a Prometheus data source, so every panel's query goes through Grafana's own
``/api/ds/query`` (its Prometheus plugin, its ``$__rate_interval``).

Owns: building ``grafana`` once into ``.cache/grafana/<version>/`` (``build``) and starting a
server with provisioned data source and dashboards on a free loopback port (``start_grafana``).
Does not own the dashboards (``monitoring/``) or what Prometheus scrapes.

The proxy serves Grafana's module at one version only, a commit of 2023-06-09 (Grafana
10.0.0-pre; every tag and newer commit answers 403), so that is the Grafana tested; the
dashboards' JSON (schemaVersion 41) is stored as given and its queries run in the backend. Its
``pkg/server/wire_gen.go`` is generated, not shipped: ``wire gen`` makes it first, with wire
v0.6.0 built against a newer ``golang.org/x/tools`` than wire's own (v0.7.0 panics in
``go/types`` under this Go). cgo is on (sqlite). No frontend is built: the HTTP API needs none.
Cold: about 4 minutes on two cores (module 5 s, wire 15 s, wire gen 75 s, build 150 s).

    python -m tests.infra.grafana build   # what `make test` runs first
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra import processes
from tests.infra.kafka import LOOPBACK, REPO_ROOT, TestbedError, free_port

MODULE = "github.com/grafana/grafana"
VERSION = "v1.9.2-0.20230609164553-81d85ce8028d"
RELEASE, COMMIT = "10.0.0-pre", "81d85ce8028d"
WIRE, X_TOOLS = "v0.6.0", "v0.52.0"
CACHE = REPO_ROOT / ".cache" / "grafana" / COMMIT
BINARY = CACHE / "grafana"
HOME = CACHE / "home"  # the module's source: conf/defaults.ini and the core plugins' plugin.json


def _go(*args: str, cwd: Path) -> str:
    from tests.infra import k8s_build

    env = {**k8s_build.go_env(), "CGO_ENABLED": "1", "GOFLAGS": "-buildvcs=false -mod=mod"}
    done = subprocess.run(
        ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise TestbedError(f"go {' '.join(args)} failed in {cwd}:\n{done.stderr[-3000:]}")
    return done.stdout


def build(log: bool = True) -> Path:
    """The grafana binary, built once from the module proxy."""
    if BINARY.exists():
        return BINARY
    started = time.monotonic()
    if log:
        print(f"building grafana {RELEASE} ({COMMIT}) from the Go module proxy", file=sys.stderr)
    CACHE.mkdir(parents=True, exist_ok=True)
    found = json.loads(_go("mod", "download", "-json", f"{MODULE}@{VERSION}", cwd=CACHE))
    shutil.rmtree(HOME, ignore_errors=True)
    shutil.copytree(found["Dir"], HOME)
    for path in [HOME, *HOME.rglob("*")]:  # the module cache is read-only; wire writes here
        path.chmod(path.stat().st_mode | 0o200)
    tools = CACHE / "wire-tool"
    tools.mkdir(exist_ok=True)
    (tools / "go.mod").write_text(
        f"module wiretool\n\ngo 1.24\n\nrequire (\n\tgithub.com/google/wire {WIRE}\n"
        f"\tgolang.org/x/tools {X_TOOLS}\n)\n"
    )
    (tools / "tools.go").write_text('package main\n\nimport _ "github.com/google/wire/cmd/wire"\n')
    _go("build", "-o", str(tools / "wire"), "github.com/google/wire/cmd/wire", cwd=tools)
    done = subprocess.run(
        [str(tools / "wire"), "gen", "-tags", "oss", "./pkg/server"],
        cwd=HOME, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise TestbedError(f"wire gen failed in {HOME}:\n{done.stderr[-3000:]}")
    ldflags = f"-X main.version={RELEASE} -X main.commit={COMMIT}"
    _go("build", "-ldflags", ldflags, "-o", str(CACHE / "partial"), "./pkg/cmd/grafana", cwd=HOME)
    (CACHE / "partial").rename(BINARY)
    if log:
        print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return BINARY


@dataclass
class Grafana:
    workdir: Path
    port: int
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def request(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """GET (or POST ``body`` to) the API; the decoded answer, or TestbedError with it."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise TestbedError(f"grafana {path}: {exc.code} {exc.read()[:2000]!r}") from None

    def query(self, expr: str, datasource: str, minutes: int = 5) -> list[dict[str, Any]]:
        """A range query through Grafana's ``/api/ds/query``, as a panel sends it: its frames."""
        now = int(time.time() * 1000)
        answer = self.request("/api/ds/query", {
            "from": str(now - minutes * 60_000), "to": str(now),
            "queries": [{"refId": "A", "datasource": {"type": "prometheus", "uid": datasource},
                         "expr": expr, "range": True, "intervalMs": 15_000,
                         "maxDataPoints": 200}],
        })  # fmt: skip
        result = answer["results"]["A"]
        if result.get("error"):
            raise TestbedError(f"grafana answered {expr!r} with {result['error']}")
        frames: list[dict[str, Any]] = result.get("frames", [])
        return frames

    def stop(self) -> None:
        processes.stop(self.pid, timeout=10)
        self.pid = None


def start_grafana(workdir: Path, prometheus_url: str, dashboards: list[Path]) -> Grafana:
    """Grafana with a Prometheus data source (uid ``prometheus``, the dashboards' default) at
    ``prometheus_url`` and ``dashboards`` provisioned, anonymous users admins."""
    shutil.rmtree(workdir, ignore_errors=True)
    provisioning = workdir / "provisioning"
    for folder in ("datasources", "dashboards", "plugins", "alerting", "notifiers"):
        (provisioning / folder).mkdir(parents=True)
    (provisioning / "datasources" / "prometheus.yaml").write_text(json.dumps({
        "apiVersion": 1,
        "datasources": [{"name": "Prometheus", "uid": "prometheus", "type": "prometheus",
                         "access": "proxy", "url": prometheus_url, "isDefault": True}],
    }))  # fmt: skip
    boards = workdir / "boards"
    boards.mkdir()
    for board in dashboards:
        shutil.copyfile(board, boards / board.name)
    (provisioning / "dashboards" / "kafleet.yaml").write_text(json.dumps({
        "apiVersion": 1,
        "providers": [{"name": "kafleet", "type": "file", "options": {"path": str(boards)}}],
    }))  # fmt: skip
    uids = {json.loads(board.read_text())["uid"] for board in dashboards}
    server = Grafana(workdir, free_port())
    env = {
        **os.environ,
        "GF_PATHS_DATA": str(workdir / "data"), "GF_PATHS_LOGS": str(workdir / "logs"),
        "GF_PATHS_PLUGINS": str(workdir / "plugins"),
        "GF_PATHS_PROVISIONING": str(provisioning),
        "GF_SERVER_HTTP_ADDR": LOOPBACK, "GF_SERVER_HTTP_PORT": str(server.port),
        "GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Admin",
        "GF_ANALYTICS_REPORTING_ENABLED": "false", "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        "GF_LOG_LEVEL": "warn",
    }  # fmt: skip
    server.pid = processes.spawn(
        [str(build()), "server", f"--homepath={HOME}"], workdir / "grafana.log", env=env
    )

    def healthy() -> bool:
        try:
            return bool(server.request("/api/health").get("database") == "ok")
        except TestbedError:  # an HTTP error while it starts
            return False

    # Healthy is not provisioned: Grafana loads the dashboards' files in a service of its own,
    # which may not have run yet when /api/health first answers.
    def provisioned() -> bool:
        if not healthy():
            return False
        try:
            found = server.request("/api/search?type=dash-db")
        except TestbedError:
            return False
        return uids <= {d["uid"] for d in found}

    why = processes.wait_started(server.pid, workdir / "grafana.log", provisioned, 120)
    if why:
        server.stop()
        raise TestbedError(f"grafana on {server.url} {why} (dashboards wanted: {sorted(uids)})")
    return server


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        print("usage: python -m tests.infra.grafana build", file=sys.stderr)
        sys.exit(2)
    try:
        print(build())
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
