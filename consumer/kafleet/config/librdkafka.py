"""The configuration as librdkafka sees it: the ``Consumer``'s properties, and ``kafka``'s limits.

Owns: the librdkafka properties kafleet sets itself (``OWNED_PROPERTIES``, each with the field
to use instead) and the names that look secret (``SECRET_PROPERTY``), which the ``kafka``
pass-through may not hold (``check_passthrough``); and rendering a ``ConsumerConfig`` as the
confluent-kafka ``Consumer``'s properties (``consumer_properties``, behind
``ConsumerConfig.librdkafka()``), with kafleet's fetch and prefetch sizes.

Does not own the settings themselves (``config/model.py``), the security properties
(``config/security.py``), the Java share consumer's properties (``config/share.py``) or the
client (``engine/poller.py``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafleet.config.model import ConsumerConfig

# librdkafka properties that kafleet sets itself; each maps to the field to use instead.
OWNED_PROPERTIES = {
    "bootstrap.servers": "bootstrap_servers",
    "group.id": "group_id",
    "group.instance.id": "group_instance_id",
    "group.protocol": "group_protocol",
    "enable.auto.commit": "commit_interval_ms (kafleet commits only what is done)",
    "enable.auto.offset.store": "commit_interval_ms (kafleet commits only what is done)",
    "auto.commit.interval.ms": "commit_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "session.timeout.ms": "session_timeout_ms",
    "partition.assignment.strategy": "group_protocol (classic uses cooperative-sticky)",
    "auto.offset.reset": "auto_offset_reset",
    "security.protocol": "security.protocol",
}
SECRET_PROPERTY = re.compile(r"(password|secret|token|private\.key|key\.pem)", re.IGNORECASE)


def check_passthrough(value: dict[str, Any]) -> dict[str, Any]:
    """``kafka`` as given, or a ``ValueError`` for the first property kafleet sets itself or
    that looks secret (secrets go in ``security``, where they are masked)."""
    for key in value:
        if key in OWNED_PROPERTIES:
            raise ValueError(f"{key!r} is set by kafleet; use {OWNED_PROPERTIES[key]}")
        if SECRET_PROPERTY.search(key):
            raise ValueError(f"{key!r} is a secret; put it in security.* so it is masked")
    return value


def consumer_properties(config: ConsumerConfig) -> dict[str, str | int | float | bool]:
    """The confluent-kafka ``Consumer`` properties ``config`` stands for."""
    props: dict[str, str | int | float | bool] = {
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": config.group_id,
        "group.protocol": config.group_protocol,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": config.auto_offset_reset,
        "max.poll.interval.ms": config.max_poll_interval_ms,
        # kafleet's queues hold the backlog, so librdkafka's prefetch need only cover about
        # one queue per partition (its default, 100,000 messages, is what pause() throws
        # away). And when a prefetch threshold is passed, librdkafka waits
        # fetch.queue.backoff.ms (1 s by default) before fetching that partition again,
        # which after a pause/resume stalls the partition: keep that wait short.
        # Fetch sizes: librdkafka's (64 MB prefetch, 50 MB fetches) were most of a worker's
        # memory in benchmark B4; these halve it at the same rate (B1).
        "queued.min.messages": config.queue.max_records,
        "queued.max.messages.kbytes": 2048,
        "fetch.queue.backoff.ms": 20,
        # A broker connection has one Fetch out at a time, and at the log end the broker holds
        # it up to fetch.wait.max.ms (500 ms by default) waiting for data. A partition resumed
        # (its prefetch thrown away by the pause), seeked or newly assigned waits for that
        # Fetch to come back first: B3's single partition sat idle up to 0.5 s after a resume
        # near the end of its backlog. 100 ms bounds that wait, at five empty Fetches a second
        # per idle broker connection instead of two.
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 2 * 1024 * 1024,
        "max.partition.fetch.bytes": 256 * 1024,
        **config.security.properties(),
    }
    if config.group_instance_id:
        props["group.instance.id"] = config.group_instance_id
    if config.statistics_interval_ms:
        props["statistics.interval.ms"] = config.statistics_interval_ms
    if config.group_protocol == "classic":
        props["partition.assignment.strategy"] = "cooperative-sticky"
        props["session.timeout.ms"] = config.session_timeout_ms
    props.update(config.kafka)
    return props
