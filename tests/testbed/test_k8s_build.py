"""The scratch Go module that builds the control plane: its replace list is generated, not typed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.infra import k8s_build

KUBERNETES_GOMOD = """\
module k8s.io/kubernetes

go 1.26.0

require (
\tgo.etcd.io/etcd/server/v3 v3.6.8 // indirect
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/example/other => github.com/example/other v1.2.3
)
"""


def test_each_staging_module_is_replaced_by_the_version_published_for_the_release() -> None:
    replaces = k8s_build.staging_replacements(KUBERNETES_GOMOD, "v1.36.3")

    assert replaces == {"k8s.io/api": "v0.36.3", "k8s.io/client-go": "v0.36.3"}


def test_the_rendered_module_pins_kubernetes_and_the_etcd_that_kubernetes_pins() -> None:
    rendered = k8s_build.render_gomod(KUBERNETES_GOMOD, "v1.36.3")

    assert "\tk8s.io/kubernetes v1.36.3\n" in rendered
    assert "\tgo.etcd.io/etcd/server/v3 v3.6.8\n" in rendered
    assert "\tk8s.io/api => k8s.io/api v0.36.3\n" in rendered
    assert "github.com/example/other" not in rendered
    assert "\ngo 1.26.0\n" in rendered


def test_the_committed_go_mod_replaces_exactly_the_staging_modules_of_the_pinned_release() -> None:
    info = json.loads(
        subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{k8s_build.K8S_VERSION}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
            env={**k8s_build.go_env()},
            cwd=k8s_build.MODULE_DIR,
        ).stdout
    )
    expected = k8s_build.staging_replacements(Path(info["GoMod"]).read_text())
    committed = (k8s_build.MODULE_DIR / "go.mod").read_text()

    for module, version in expected.items():
        assert f"\t{module} => {module} {version}\n" in committed, module
    assert committed.count(" => ") == len(expected)
