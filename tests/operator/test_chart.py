"""The chart's defaults follow the release: its appVersion is kafleet's version, the operator's
image is ``kafleet:<appVersion>`` unless the values say otherwise, and the operator's pod runs
``kafleet operator`` once (the image's entrypoint is ``kafleet`` too) as the image's user."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

import kafleet
from tests.conftest import REPO
from tests.infra import k8s_build

CHART = REPO / "charts" / "kafleet"


def _operator_pod(*sets: str) -> dict[str, Any]:
    rendered = subprocess.run(
        [str(k8s_build.BIN / "helm"), "template", "kafleet", str(CHART), *sets],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_charts_app_version_is_kafleets_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())

    assert chart["appVersion"] == kafleet.__version__


def test_the_operator_image_defaults_to_kafleet_at_the_app_version() -> None:
    (container,) = _operator_pod()["containers"]

    assert container["image"] == f"kafleet:{kafleet.__version__}"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_a_registry_and_a_tag_from_the_values_name_the_image() -> None:
    pod = _operator_pod("--set", "image.repository=registry.example.com/kafleet")
    tagged = _operator_pod("--set", "image.repository=r.example/kafleet", "--set", "image.tag=9")

    assert pod["containers"][0]["image"] == f"registry.example.com/kafleet:{kafleet.__version__}"
    assert tagged["containers"][0]["image"] == "r.example/kafleet:9"


def test_the_operator_runs_kafleet_operator_once_as_the_images_user() -> None:
    pod = _operator_pod()
    (container,) = pod["containers"]

    assert [*container["command"], container["args"][0]] == ["kafleet", "operator"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
