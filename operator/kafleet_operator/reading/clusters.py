"""One Kafka view per cluster: every watched group's offsets, read together once a pass.

Owns: one admin client per distinct Kafka connection (``snapshots.Target.key``: bootstrap
servers plus the security settings, passwords included), shared by every ConsumerGroup that
connects the same way; and reading, for all those groups at once, in a bounded number of
requests (``View.read``):

- the topics, their partitions and each partition's leader, from metadata cached for
  ``METADATA_TTL_S`` (asked again at once when a group names a topic it has not seen, or the
  offsets topic is not there yet, and within a read whose offsets failed: ``refresh``);
- the log-end offset of every watched partition (``log_offsets.py``: ``list_offsets`` calls in
  flight together, librdkafka sends one request per leader; a partition whose leader did not
  answer is a failure, never an offset, and one whose leader moved under the client's metadata
  is asked again after the metadata is), within ``ENDS_S`` of the read's ``TIMEOUT_S``, so a
  dead leader leaves time for the rest; and the log-start offset of the partitions some group
  has not committed yet (what ``auto_offset_reset: earliest`` counts), likewise;
- each group's committed offsets (``committed.py``: every group in one call of Kafka's Java
  admin, one FindCoordinator and one OffsetFetch per coordinator, where the operator was
  given Kafka's Java client; else one group per request as librdkafka allows, all in flight
  together), asked again while a coordinator moves or loads; a group that had committed
  everything, on partitions whose log ends have not moved since, is asked only every
  ``SETTLED_S`` (its committed offsets cannot have moved past the ends, and only a reset
  moves them back: a group with no worker running, where resets are done, is asked every
  pass), so a fleet at rest asks half as often as KEDA (15 s);
- each share group's start offsets and lags (``Want.share``: a share group commits nothing),
  every share group in one round through Kafka's Java admin (``share_lag.py``), and the
  log-start offset of the partitions where the broker knows neither (the group has not
  started there).

The Java admin (``java_admin.py``) is one per view, shared by both; its JVM starts in this
process at the first read that needs it (a consumer group's committed offsets when the
classpath is set, a share group's states), never before, and never where no classpath is.

A cluster that cannot be reached, or refuses the credentials, fails its own snapshot; a
partition whose offsets cannot be read is in the snapshot's ``unreadable`` (its log end) or
``unreadable_starts`` (its log start), with why, and a group whose committed offsets cannot be
read (or were not all answered) has a ``Failure`` for them.

librdkafka (2.16, and its master as of this writing: confluentinc/librdkafka#5040) crashes the
process when an admin client's OffsetFetch answers NOT_COORDINATOR or another error that asks
for a coordinator refresh (a coordinator moving: a broker restarting, a new offsets topic): it
asks the client's consumer group, which an admin client does not have, to look the
coordinator up. So a ``View`` runs in a process of its own (``readers.py``), never in the
operator's. (Java's admin, where it reads the committed offsets, looks the coordinator up
again itself.)

Does not own the process (``readers.py``), the values asked and answered (``snapshots.py``:
``Want``, ``Target``, ``Snapshot``, ``Failure``), how each kind of offset is asked
(``log_offsets.py``, ``committed.py``, ``share_lag.py``), what the offsets mean
(``lag_reader.py``: a group's lag from a snapshot) or where the passwords come from
(``credentials.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from kafleet.config.security import Security
from kafleet_operator.reading import committed, java_admin, log_offsets, share_lag
from kafleet_operator.reading.share_lag import ShareState
from kafleet_operator.reading.snapshots import TP, Failure, Snapshot, Want

TIMEOUT_S = 10.0
METADATA_TTL_S = 60.0
METADATA_TRY_S = 2.0  # how often a metadata request gives a reported auth failure a look
MISSING_S = 10.0  # a topic a group names and the cluster lacks: metadata asked again this often
# Of a read's TIMEOUT_S, what the log ends may take, their calls after a leader moved included
# (``log_offsets.read``): a dead leader costs one call's ``log_offsets.TRY_S``, and the
# committed offsets keep the rest.
ENDS_S = 6.0
SETTLED_S = 60.0  # a caught-up group's committed offsets, unchanged log ends: asked this often
LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]
EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


class View:
    """One cluster, as every group that connects to it the same way sees it."""

    def __init__(
        self, bootstrap: str, security: Security, share_classpath: str | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.authentication_error: KafkaError | None = None
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, **security.properties()}
        for name, value in config.items():  # librdkafka's own words name no file
            if name.endswith(".location") and not os.path.exists(str(value)):
                text = f"{name} {value}: no such file in the operator's pod"
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, text))
        config["error_cb"] = self._on_error
        self.admin = AdminClient(config)
        self._topics: dict[str, tuple[int, ...]] = {}
        self._leaders: dict[TP, int] = {}  # each partition's leader, as the metadata said last
        self._topics_at = -METADATA_TTL_S
        # group -> (when its committed offsets were read, the log ends they were all at)
        self._caught_up: dict[str, tuple[float, dict[TP, int]]] = {}
        self.used_at = time.monotonic()
        # Kafka's Java admin, made at the first read that needs it (its JVM started then).
        self.java = java_admin.JavaAdmin(bootstrap, security, share_classpath)
        self.shares = share_lag.ShareOffsets(bootstrap, security, share_classpath, self.java)
        self.committed = committed.CommittedOffsets(self.admin, self.java)

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self.authentication_error = error

    def _metadata(self, deadline: float) -> dict[str, tuple[int, ...]]:
        """Every topic's partitions; raises the authentication failure as soon as it is known."""
        while True:
            remaining = deadline - time.monotonic()
            try:
                found = self.admin.list_topics(timeout=max(0.1, min(METADATA_TRY_S, remaining)))
            except KafkaException:
                self.admin.poll(0)  # serves error_cb
                if self.authentication_error is not None:
                    raise KafkaException(self.authentication_error) from None
                if remaining <= METADATA_TRY_S:
                    raise
                continue
            self._leaders = {
                (name, p): meta.leader
                for name, t in found.topics.items()
                for p, meta in t.partitions.items()
            }
            return {name: tuple(sorted(t.partitions)) for name, t in found.topics.items()}

    def topics(self, wants: Iterable[Want], deadline: float) -> dict[str, tuple[int, ...]]:
        """Every topic's partitions, asked again after ``METADATA_TTL_S``, or after
        ``MISSING_S`` while a group names a topic the last answer did not have."""
        named = {t for w in wants for t in w.topics}
        age = time.monotonic() - self._topics_at
        if age > METADATA_TTL_S or (age > MISSING_S and not named <= self._topics.keys()):
            self._topics, self._topics_at = self._metadata(deadline), time.monotonic()
        return self._topics

    def refresh(self, until: float) -> dict[TP, int]:
        """The metadata asked again at once (librdkafka's cache of leaders and their epochs
        with it), by ``until``; each partition's leader. Raises ``KafkaException``."""
        self._topics, self._topics_at = self._metadata(until), time.monotonic()
        return self._leaders

    def read(self, wants: list[Want]) -> Snapshot:
        """The offsets every group of ``wants`` needs; raises ``KafkaException`` when the
        cluster cannot be reached or refuses the client. No wants: a standby keeping the
        cluster warm for the groups it may come to lead (the metadata, asked once a
        ``METADATA_TTL_S``, keeps the connection open), so that its first pass as a leader
        connects to nothing."""
        self.used_at = time.monotonic()
        deadline = time.monotonic() + TIMEOUT_S
        topics = self.topics(wants, deadline)
        snapshot = Snapshot(topics=topics, at=time.time())
        if not wants:
            return snapshot
        # Two ConsumerGroups may read one Kafka group's partitions (librdkafka refuses a
        # partition twice), and a group with no partition yet (its topics do not exist) asks
        # nothing (librdkafka refuses an empty list).
        found: dict[str, set[TP]] = {}
        shared: dict[str, set[TP]] = {}
        for want in wants:
            into = shared if want.share else found
            into.setdefault(want.group_id, set()).update(snapshot.partitions(want)[0])
        watched = {group: sorted(tps) for group, tps in found.items() if tps}
        share_watched = {group: sorted(tps) for group, tps in shared.items() if tps}
        unsettled = {w.group_id for w in wants if not w.may_settle}
        every = sorted({tp for tps in [*watched.values(), *share_watched.values()] for tp in tps})
        if not every:
            return snapshot
        ends = self._offsets(
            every, LATEST, snapshot.unreadable, min(deadline, time.monotonic() + ENDS_S)
        )
        if not ends:  # not one partition answered: the cluster is down, not a leader
            self._topics_at = -METADATA_TTL_S  # and its metadata is asked again next pass
            raise next(iter(snapshot.unreadable.values())).exception()
        # Asked even where the metadata shows no offsets topic: a principal that may not
        # describe it (consumer ACLs, MSK IAM) does not see it, and its groups have commits.
        asked = self._settled(watched, ends, snapshot, unsettled)
        snapshot.committed.update(self.committed.read(asked, deadline))
        self._remember(asked, ends, snapshot)
        unstarted = self._shares(share_watched, snapshot, deadline)
        uncommitted = sorted(
            {
                tp
                for found in snapshot.committed.values()
                if isinstance(found, dict)
                for tp, offset in found.items()
                if offset is None and tp in ends
            }
            | {tp for tp in unstarted if tp in ends}
        )
        if uncommitted:
            starts = self._offsets(uncommitted, EARLIEST, snapshot.unreadable_starts, deadline)
            snapshot.starts.update(starts)
        snapshot.ends.update(ends)
        return snapshot

    def _shares(self, watched: dict[str, list[TP]], snapshot: Snapshot, deadline: float) -> set[TP]:
        """Every share group's partitions (``snapshot.share``); returns the watched ones where
        the broker knows neither a start offset nor a lag (the group has not started there:
        their log-start offsets are asked, as for a consumer group's partitions with no
        commit)."""
        if not watched:
            return set()
        answers = self.shares.read(sorted(watched), max(0.1, deadline - time.monotonic()))
        unstarted: set[TP] = set()
        for group, tps in watched.items():
            answer = answers.get(group, (KafkaError._FAIL, "no answer"))
            if isinstance(answer, tuple):
                snapshot.share[group] = Failure(*answer)
                continue
            snapshot.share[group] = {tp: answer[tp] for tp in tps if tp in answer}
            unknown = ShareState(None, None)
            unstarted.update(tp for tp in tps if answer.get(tp, unknown) == unknown)
        return unstarted

    def _settled(
        self,
        watched: dict[str, list[TP]],
        ends: dict[TP, int],
        snapshot: Snapshot,
        unsettled: set[str],
    ) -> dict[str, list[TP]]:
        """The groups whose committed offsets must be asked: all but those that had
        committed up to the log end of every partition, which has not moved since, within
        ``SETTLED_S`` (their committed offsets are those, unless someone reset them: asked
        again after ``SETTLED_S``). A fleet at rest costs a fraction of an OffsetFetch each."""
        now = time.monotonic()
        asked: dict[str, list[TP]] = {}
        for group, tps in watched.items():
            known = self._caught_up.get(group)
            fresh = known is not None and now - known[0] < SETTLED_S and group not in unsettled
            if (
                fresh
                and known is not None
                and all(tp in ends and known[1].get(tp) == ends[tp] for tp in tps)
            ):
                snapshot.committed[group] = {tp: ends[tp] for tp in tps}
                continue
            asked[group] = tps
        return asked

    def _remember(
        self, asked: dict[str, list[TP]], ends: dict[TP, int], snapshot: Snapshot
    ) -> None:
        now = time.monotonic()
        for group, tps in asked.items():
            found = snapshot.committed.get(group)
            if isinstance(found, dict) and all(
                tp in ends and found.get(tp) == ends[tp] for tp in tps
            ):
                self._caught_up[group] = (now, {tp: ends[tp] for tp in tps})
            else:
                self._caught_up.pop(group, None)
        for group in [g for g, (at, _) in self._caught_up.items() if now - at >= SETTLED_S]:
            del self._caught_up[group]

    def _offsets(
        self, tps: list[TP], spec: Any, failures: dict[TP, Failure], until: float
    ) -> dict[TP, int]:
        """``tps``' offsets by ``until``; a partition that fails (no leader, a leader that did
        not answer) is recorded in ``failures``, never guessed (``log_offsets.read``)."""
        found, failed = log_offsets.read(self.admin, tps, spec, until, self._leaders, self.refresh)
        failures.update(failed)
        return found
