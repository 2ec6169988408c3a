"""The operator's own watches of what the groups own: a store of what each object contributes
by key, kept by a list, then a watch (on the real apiserver), and replaced by a new list."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes
import pytest

from kafleet_operator.reading import informers, watched
from tests.conftest import K8s
from tests.infra.waiting import wait_until


def test_a_store_keeps_what_each_object_contributes_under_each_key() -> None:
    store = informers.Store()
    store.put("u1", "shop", {("shop", "orders"): "10.0.0.1"})
    store.put("u2", "shop", {("shop", "orders"): "10.0.0.2"})
    store.put("u3", "shop", {("shop", "billing"): "10.0.0.3"})
    assert sorted(store[("shop", "orders")]) == ["10.0.0.1", "10.0.0.2"]

    store.put("u1", "shop", {})  # no longer counts
    store.drop("u3")
    assert store.get(("shop", "orders")) == ("10.0.0.2",)
    assert ("shop", "billing") not in store


def test_a_new_list_replaces_what_a_store_held_of_that_namespace_only() -> None:
    """A watch that broke missed events: the list says what there is (a deletion missed)."""
    store = informers.Store()
    store.put("u1", "shop", {("shop", "a"): 1})
    store.put("u2", "shop", {("shop", "b"): 2})
    store.put("u3", "bank", {("bank", "c"): 3})

    store.replace("shop", {"u2": ("shop", {("shop", "b"): 20})})

    assert dict(store) == {("shop", "b"): (20,), ("bank", "c"): (3,)}
    store.replace(None, {})  # the whole cluster's list: nothing left
    assert dict(store) == {}


@pytest.fixture
def config_maps(k8s: K8s, namespace: str) -> Iterator[tuple[informers.Informer, informers.Store]]:
    """The ConfigMaps labelled as the operator's in the test's namespace, kept in a store."""
    core = kubernetes.client.CoreV1Api(k8s.api)

    def lister(**kwargs: Any) -> Any:
        return core.list_namespaced_config_map(namespace, **kwargs)

    store = informers.Store()
    informer = informers.Informer(
        "config_maps", lister, namespace, watched.SELECTOR, watched.config_map_kept, store
    )
    yield informer, store
    informer.stop()


def config_map(namespace: str, name: str, value: str, labels: Mapping[str, str]) -> Any:
    return kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        data={"value": value},
    )


def test_an_informer_lists_then_follows_additions_changes_and_deletions(
    k8s: K8s, namespace: str, config_maps: tuple[informers.Informer, informers.Store]
) -> None:
    informer, store = config_maps
    core = kubernetes.client.CoreV1Api(k8s.api)
    core.create_namespaced_config_map(namespace, config_map(namespace, "a", "1", watched.MANAGED))
    core.create_namespaced_config_map(namespace, config_map(namespace, "other", "1", {}))
    informer.start()
    wait_until(informer.listed.is_set, 30, "the first list")
    assert set(store) == {(namespace, "a")}  # only the operator's, by the API server's selector

    core.create_namespaced_config_map(namespace, config_map(namespace, "b", "1", watched.MANAGED))
    core.patch_namespaced_config_map("a", namespace, {"data": {"value": "2"}})
    core.delete_namespaced_config_map("b", namespace)
    core.create_namespaced_config_map(namespace, config_map(namespace, "c", "1", watched.MANAGED))

    def followed() -> bool:
        found = {key: values[0]["data"]["value"] for key, values in store.items()}
        return found == {(namespace, "a"): "2", (namespace, "c"): "1"}

    wait_until(followed, 30, "the watch's events in the store", every=0.1)
