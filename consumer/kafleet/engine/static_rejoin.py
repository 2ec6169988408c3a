"""A static member that comes back before its old self has gone: wait for the old session to
end, and join again, instead of dying or hanging.

With KIP-848 (``group_protocol: consumer``), a member that was killed (SIGKILL, an OOM kill, a
node lost) leaves its ``group_instance_id`` held by the group until the broker's session
timeout (``group.consumer.session.timeout.ms``, 45 s by default) ends it. A new process with
the same id (a container restarted in the same pod: the operator sets the id to the pod's
name) is refused with UNRELEASED_INSTANCE_ID, which librdkafka makes a fatal error of the whole
client (its error callback gets ``_FATAL``, whose ``fatal()`` flag is not set). Before this
module the worker logged a warning and stayed alive, polling a dead client, outside its group
for good (found on the three-broker cluster: ``tests/faults/test_worker_bounces.py``). The
classic protocol replaces the old member at once and never says this.

Owns: telling that error apart (``is_unreleased_instance``) and the pause between tries
(``RETRY_S``): the Poller closes the dead client and makes a new one, as long as the worker
holds no partition (a join never happened, so nothing is lost and nothing is committed).
Does not own the client (``poller.py``) nor any other fatal error, which stays fatal.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

# librdkafka's words for RD_KAFKA_RESP_ERR_UNRELEASED_INSTANCE_ID (rd_kafka_err2str), which the
# fatal error's text carries; the code itself is only in rd_kafka_fatal_error(), which
# confluent-kafka does not expose.
UNRELEASED = "instance ID is still used by another member"
RETRY_S = 5.0  # a join try every 5 s: one client made, one heartbeat refused


def is_fatal(err: KafkaError) -> bool:
    """librdkafka's fatal errors: flagged, or delivered to the error callback as ``_FATAL``."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def is_unreleased_instance(err: KafkaError) -> bool:
    """The group still holds this member's ``group_instance_id`` for an earlier process."""
    return is_fatal(err) and UNRELEASED in err.str()
