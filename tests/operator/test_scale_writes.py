"""A scale decision is written only if the group still has the count it was decided from: a
decision made from a copy of the group behind the API server's (a pod that came to lead a
group scaled while it stood by, or a watch that fell behind) is not written, where it would
have scaled the group down from a count it never saw (review of issue 34). Against a real
apiserver, with no operator running."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes
import pytest

from kafleet_operator.reconcile import kube
from tests.conftest import K8s
from tests.operator.conftest import apply, consumer_group, get


@pytest.fixture
def edge(k8s: K8s, crd: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The operator's API client, pointed at the test's apiserver."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(k8s.kubeconfig), client_configuration=configuration
    )
    client = kube.TimedApiClient(configuration)
    monkeypatch.setattr(kube, "_client", client)
    yield
    client.close()


def spec_replicas(k8s: K8s, namespace: str) -> int:
    return int(get(k8s, namespace, "kcg", "scaled")["spec"]["replicas"])


def test_a_scale_decided_from_a_copy_behind_the_servers_is_not_written(
    k8s: K8s, namespace: str, edge: None
) -> None:
    apply(k8s, namespace, consumer_group("scaled", "127.0.0.1:9", "orders", replicas=5))
    copy = get(k8s, namespace, "kcg", "scaled")  # the copy: 5 replicas
    k8s.kubectl("scale", "-n", namespace, "kcg/scaled", "--replicas=8")

    assert not kube.scale(copy, 3, expected=5)
    assert spec_replicas(k8s, namespace) == 8

    assert kube.scale(copy, 6, expected=8)  # decided from the count there is: written
    assert spec_replicas(k8s, namespace) == 6


def test_a_copy_behind_only_in_its_status_is_scaled(k8s: K8s, namespace: str, edge: None) -> None:
    """The pass's own status writes move the resourceVersion every pass: a copy behind by
    those alone still scales (the precondition is the version just read, not the copy's)."""
    apply(k8s, namespace, consumer_group("scaled", "127.0.0.1:9", "orders", replicas=2))
    copy = get(k8s, namespace, "kcg", "scaled")
    kube.patch_status(copy, {"lag": 40})

    assert kube.scale(copy, 4, expected=2)
    assert spec_replicas(k8s, namespace) == 4
