"""A restarted operator passes its groups once it has listed what they own, however many objects
it watches (B9: kopf's indexes held every handler until they were filled, in time quadratic in
the objects watched, and a restart over 3,000 groups had passed none after 8 minutes).

A real operator process on the real apiserver, restarted over a few groups twice: alone, then
beside thousands of ConfigMaps labelled as the operator's, which it watches as it watches a big
fleet's (what a fleet's objects cost a restart, without making a fleet). The second restart is
measured against the first, not against the clock."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from kafleet_operator.reading import watched
from tests.conftest import K8s, TopicFactory
from tests.infra.waiting import wait_until
from tests.operator.conftest import Operator, condition, consumer_group
from tests.operator.test_fleet_at_scale import groups

GROUPS = 5
WATCHED = 5000  # objects the operator watches besides the groups' own
CHUNK = 500  # objects a kubectl apply
INTERVAL_S = 1.0  # the test operator's --interval-s
SLACK_PASSES = 10  # what the objects may add to the first pass, in passes


def passed(op: Operator) -> set[str]:
    """The groups the operator has passed at least once."""
    url = f"http://127.0.0.1:{op.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        sample.labels["consumergroup"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kafleet_operator_passes_total" and sample.value > 0
    }


def restarted(operator: Callable[..., Operator], names: set[str]) -> float:
    """Seconds from a new operator's start until it has passed every group of ``names``."""
    op = operator()
    started = time.monotonic()

    def all_passed() -> bool:
        try:
            return names <= passed(op)
        except OSError:  # not serving yet
            return False

    wait_until(all_passed, 300, "every group passed by the restarted operator", every=0.2)
    took = time.monotonic() - started
    op.stop()
    return took


def test_thousands_of_watched_objects_do_not_hold_back_a_restarted_operators_first_pass(
    k8s: K8s,
    namespace: str,
    kafka: str,
    topic_factory: TopicFactory,
    operator: Callable[..., Operator],
) -> None:
    topic = topic_factory(1)
    names = {f"g{n}" for n in range(GROUPS)}
    first = operator()
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [consumer_group(name, kafka, topic) for name in sorted(names)],
    }
    k8s.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(listing))

    def settled() -> bool:  # applied, and Ready: the state a restart finds
        found = groups(k8s, namespace)
        return all(condition(found.get(n, {}), "Ready").get("status") == "True" for n in names)

    wait_until(settled, 120, "the groups Ready", every=1)
    first.stop()
    alone = restarted(operator, names)

    watched_too = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"other-{i:05d}", "labels": watched.MANAGED},
            "data": {"n": str(i)},
        }
        for i in range(WATCHED)
    ]
    for i in range(0, WATCHED, CHUNK):
        chunk = {"apiVersion": "v1", "kind": "List", "items": watched_too[i : i + CHUNK]}
        k8s.kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=json.dumps(chunk))
    beside = restarted(operator, names)

    print(f"\nevery group passed after a restart: {alone:.1f} s; beside {WATCHED:,} more "
          f"objects watched: {beside:.1f} s")  # fmt: skip
    # Before: kopf's indexes of the ConfigMaps (and the rest) held the groups' handlers, and
    # with them the pass, for a time quadratic in the objects (about 30 s more here).
    assert beside <= alone + SLACK_PASSES * INTERVAL_S, (alone, beside)
