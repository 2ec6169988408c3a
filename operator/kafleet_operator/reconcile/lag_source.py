"""Where a group's lag comes from: the cluster it reads, how it connects, and this pass's reading.

Owns: where each group reads its offsets (``target``, the periodic pass's plan: its cluster,
connecting as the workers do, with the passwords of the Secrets the spec names, kept in the
group's memo and read again after Kafka refused them, ``forget_credentials``; ``periodic.py``
reads each cluster once for all its groups and leaves the snapshot in the memo), and the
group's reading from that snapshot (``reading``: its lag, or what kept it: a Secret that could
not be read, the cluster's error).

Does not own reading Kafka (``clusters.py``, ``readers.py``), a lag from a snapshot
(``lag_reader.py``) or what the lag means for the replicas (``autoscaler.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kafleet.errors import ConfigError
from kafleet_operator.policy.spec import ParsedSpec, parse_spec
from kafleet_operator.reading import credentials, lag_reader, snapshots, watched
from kafleet_operator.reconcile import periodic
from kafleet_operator.reconcile.kube import client

_shared: credentials.SharedSecrets | None = None


def _secrets() -> credentials.SharedSecrets:
    """The process's one cache of Secrets, shared by every group's credentials."""
    global _shared
    if _shared is None:
        _shared = credentials.SharedSecrets(credentials.secret_reader(client()))
    return _shared


def target(body: Mapping[str, Any], memo: Any) -> snapshots.Target | None:
    """Where the group reads its offsets this pass (``periodic.py`` reads each cluster once
    for all its groups): connecting as its workers do, with the passwords of the Secrets
    its spec names. None when it reads nothing: an invalid spec (the pass reports it), or a
    Secret that cannot be read (kept in the memo for the pass to report)."""
    meta = body["metadata"]
    generation = meta.get("generation", 0)
    cached = memo.get("parsed")
    if cached is None or cached[0] != generation:
        try:
            cached = memo["parsed"] = (generation, parse_spec(dict(body["spec"])))
        except ConfigError:
            memo.pop("parsed", None)
            return None
    parsed: ParsedSpec = cached[1]
    if "secrets" not in memo:
        memo["secrets"] = credentials.Credentials(_secrets(), shared=_secrets())
    try:
        security = memo["secrets"].get(parsed.fleet.security, meta["namespace"])
    except credentials.CredentialsError as exc:
        memo[periodic.KAFKA] = (exc, None)
        return None
    worker = parsed.worker
    deployment = watched.deployment(meta["namespace"], meta["name"]) or {}
    running = bool((deployment.get("status") or {}).get("readyReplicas"))
    want = snapshots.Want(
        worker.group_id,
        tuple(worker.topics),
        worker.topic_pattern,
        running,
        share=worker.group_type == "share",
    )
    return snapshots.Target(worker.bootstrap_servers, security, want)


def reading(memo: Any, parsed: ParsedSpec) -> lag_reader.LagReading:
    """This pass's reading of the group, from its cluster's snapshot; raises what kept it."""
    worker, policy = parsed.worker, parsed.fleet.autoscaling
    source, want = memo.pop(periodic.KAFKA, (None, None))
    if isinstance(source, Exception):
        raise source
    if source is None or want is None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "not read yet"))
    return lag_reader.lag_of(
        source,
        want,
        worker.auto_offset_reset == "earliest",
        policy is not None and policy.scale_to_zero_on_invalid_offset,
    )


def forget_credentials(memo: Any) -> None:
    """Kafka refused the credentials: read the Secrets again next pass (they may be rotated)."""
    if "secrets" in memo:
        memo["secrets"].forget()
