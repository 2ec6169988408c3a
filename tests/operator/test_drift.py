"""The periodic pass judges a live Deployment against the spec and the pause, so a put-back
that failed (kopf never retries an event handler) or a lost watch event is made good by the
next passes (review of issue 21: a paused-replicas removal during an API server's blip left
the fleet at 0 with Ready=True)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafleet_operator.policy import builders, pause
from kafleet_operator.policy.spec import ParsedSpec, parse_spec
from kafleet_operator.reading import watched
from kafleet_operator.reconcile import kube, owned

REPO = Path(__file__).resolve().parents[2]
OWNER = {
    "apiVersion": "kafleet.io/v1alpha1",
    "kind": "ConsumerGroup",
    "metadata": {"name": "billing", "namespace": "shop", "uid": "u-1"},
}


def parsed(**changes: Any) -> ParsedSpec:
    manifest = yaml.safe_load((REPO / "examples" / "consumergroup.yaml").read_text())
    return parse_spec({**manifest["spec"], **changes})


def live(spec: ParsedSpec, replicas: int) -> Any:
    """The Deployment the builder makes, as the operator's watch of Deployments keeps it."""
    body = builders.deployment(OWNER, spec, replicas)
    (kept,) = watched.deployment_kept(body).values()
    return kept


def test_a_deployment_as_built_has_not_drifted() -> None:
    spec = parsed(replicas=3)

    assert owned.drift(live(spec, 3), spec, pause.Pause()) is None


@pytest.mark.parametrize(
    ("built_from", "held", "named"),
    [
        ({"replicas": 0}, pause.Pause(), "replicas 0, not 3"),
        ({"replicas": 3}, pause.Pause(replicas=0), "replicas 3, not 0"),
        ({"replicas": 3, "handler": "orders:other"}, pause.Pause(), "configuration hash"),
        ({"replicas": 3, "image": "registry.example.com/old:1"}, pause.Pause(), "worker image"),
    ],
    ids=["replicas-left-at-zero", "pause-not-applied", "old-configuration", "old-image"],
)
def test_a_deployment_that_differs_from_the_spec_or_the_pause_has_drifted(
    built_from: dict[str, Any], held: pause.Pause, named: str
) -> None:
    spec = parsed(replicas=3)
    old = parsed(**built_from)

    found = owned.drift(live(old, old.fleet.replicas), spec, held)

    assert found is not None
    assert named in found


def test_an_object_another_writer_keeps_changing_is_left_alone_after_five_put_backs() -> None:
    """Review of issue 21: an HPA on the Deployment, fighting the operator over replicas, had
    it put back at every event: a rescale each time, for ever."""
    taken = [owned.fighting("Deployment", "shop", "fought", float(t)) for t in range(0, 60, 10)]
    later = owned.fighting("Deployment", "shop", "fought", 400.0)

    assert taken == [False] * 5 + [True]
    assert later is False  # the window has passed: put back again


def test_the_rival_is_the_latest_writer_other_than_the_operator() -> None:
    fields = [
        {"manager": "kafleet-operator", "operation": "Apply", "time": "2026-11-23T10:00:00Z"},
        {"manager": "kubectl-edit", "operation": "Update", "time": "2026-11-23T10:05:00Z"},
        {
            "manager": "kube-controller-manager",
            "subresource": "status",
            "time": "2026-11-23T10:06:00Z",
        },
    ]

    assert kube.rival({"metadata": {"managedFields": fields}}) == "kubectl-edit"
    assert kube.rival({"metadata": {"managedFields": fields[:1]}}) == ""


def test_a_gone_group_leaves_nothing_behind_in_the_operators_memory() -> None:
    """Review of issue 22: the put-backs, writes and locks of every group ever seen were kept
    for the operator's life (memory bounded by churn, not by the groups there are)."""
    for t in range(0, 50, 10):
        owned.fighting("Deployment", "churn", "gone", float(t))
    kube._written[("Deployment", "churn", "gone")] = "7"

    owned.forget("churn", "gone")

    assert not [k for k in owned._put_backs if k[1] == "churn"]
    assert ("Deployment", "churn", "gone") not in kube._written
    assert owned.fighting("Deployment", "churn", "gone", 60.0) is False
