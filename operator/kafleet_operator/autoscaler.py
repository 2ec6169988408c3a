"""One pass's autoscaling step: read the group's lag from Kafka, wish and decide replicas.

Owns: the lag client of each group (in the pass's memo: connecting as the workers do, with
the passwords of the Secrets the spec names), the histories the policies read (log-end offsets
for the time lag, wishes for the stabilization windows), writing the lag figures to the
status, and scaling through the ``scale`` subresource (as ``kubectl scale`` and an HPA do),
with an Event for every decision. Returns the ``Degraded`` condition that reading the lag gave.

Does not own the policies (``scaling.py``), reading offsets (``lag_reader.py``) or the rest of
a pass (``observer.py``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import kopf
from confluent_kafka import KafkaException
from kubernetes import client as k8s

from kafleet_operator import credentials, lag_reader, scaling
from kafleet_operator.conditions import condition
from kafleet_operator.crd import GROUP, PLURAL, VERSION
from kafleet_operator.kube import client, post_event
from kafleet_operator.spec import ParsedSpec

log = logging.getLogger("kafleet.operator")


def observe_lag(
    body: kopf.Body,
    parsed: ParsedSpec,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: Any,
    replicas: int,
    generation: int,
) -> dict[str, Any]:
    worker = parsed.worker
    if memo.get("reader_of") != (worker.bootstrap_servers, worker.group_id):
        memo["reader_of"] = (worker.bootstrap_servers, worker.group_id)
        memo["ends"] = deque(maxlen=120)
        memo["wishes"] = deque(maxlen=2000)
    # The client connects as the workers do: their security, passwords from their Secrets.
    if "reader" not in memo:
        memo["reader"] = lag_reader.LagReader()
        memo["secrets"] = credentials.Credentials(credentials.secret_reader(client()))
    reader, secrets = memo["reader"], memo["secrets"]
    try:
        security = secrets.get(parsed.fleet.security, body.metadata["namespace"])
        reading = reader.read(
            worker.bootstrap_servers,
            worker.group_id,
            security,
            list(worker.topics),
            worker.topic_pattern,
            worker.auto_offset_reset == "earliest",
        )
    except credentials.CredentialsError as exc:
        return condition("Degraded", True, exc.reason, f"cannot read lag: {exc}", generation)
    except KafkaException as exc:
        if lag_reader.is_authentication_failure(exc):
            secrets.forget()  # the next pass reads the Secrets again: they may be rotated
            return condition(
                "Degraded",
                True,
                "KafkaAuthenticationFailed",
                f"bootstrap_servers {worker.bootstrap_servers} refused the credentials of "
                f"spec.security: {lag_reader.describe(exc)}",
                generation,
            )
        return condition(
            "Degraded",
            True,
            "KafkaUnreachable",
            f"cannot read lag from bootstrap_servers {worker.bootstrap_servers}: {exc}",
            generation,
        )
    now = time.time()
    memo["ends"].append((now, reading.end_total))
    time_lag = scaling.time_lag_s(list(memo["ends"]), reading.committed_total, now)
    patch.status.update(
        {
            "lag": reading.total,
            "maxPartitionLag": reading.max_partition,
            "partitions": reading.partitions,
            "timeLagSeconds": round(time_lag or 0.0, 1),
        }
    )
    if reading.missing_topics:
        return condition(
            "Degraded",
            True,
            "TopicNotFound",
            f"topics {reading.missing_topics} (spec.topics) do not exist",
            generation,
        )
    policy = parsed.fleet.autoscaling
    if policy is not None and reading.partitions:
        wish = scaling.wanted(reading.total, reading.partitions, policy, time_lag, replicas)
        memo["wishes"].append((now, wish))
        decision = scaling.decide(replicas, list(memo["wishes"]), now, policy)
        if decision.changes:
            _scale(body, decision, reading.total, reading.partitions)
            patch.status["lastScaleTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            patch.status["lastScaleReason"] = decision.reason
    return condition("Degraded", False, "Observed", "lag read from Kafka", generation)


def _scale(body: kopf.Body, decision: scaling.Decision, lag: int, partitions: int) -> None:
    message = (
        f"replicas {body.spec.get('replicas', 1)} -> {decision.replicas}: lag {lag} "
        f"over {partitions} partitions"
    )
    k8s.CustomObjectsApi(client()).patch_namespaced_custom_object_scale(
        GROUP,
        VERSION,
        body.metadata["namespace"],
        PLURAL,
        body.metadata["name"],
        {"spec": {"replicas": decision.replicas}},
    )
    post_event(body, decision.reason, message)
    log.info("%s/%s: %s", body.metadata["namespace"], body.metadata["name"], message)
