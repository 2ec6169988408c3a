"""The Lease edge: which shards of ConsumerGroups this operator pod leads, kept by reading and
writing ``coordination.k8s.io`` Leases in the operator's namespace.

Owns, every ``retry_s`` (one ``step``): one LIST of the namespace's Leases (every shard's and
every member's, one request whatever the counts), this pod's member Lease renewed (it says the
pod is alive and standing by, so the others leave it a share), then each shard's Lease judged
by ``policy/leases.py`` and taken, renewed or left; and the shards led (``led``, ``owns``).
Writes carry the Lease's ``resourceVersion``: of two pods writing one Lease at once, one gets a
conflict and reads again at the next step. No pod leads more than its share, the shard count
over the live members rounded up: a pod leading more releases the extra shards (the highest
first), which the pods that stood by take at their next step. No pod leads any shard while a
Lease of another shard count lives (``policy/shards.py``). ``release`` gives back every shard
led, and the member Lease, as the pod leaves.

Does not own the rules (``policy/leases.py``, ``policy/shards.py``) nor what leading a shard
means to the handlers (which ask ``owns``).
"""

from __future__ import annotations

import datetime
import logging
import math
import threading
import time
from collections.abc import Callable

from kubernetes import client as k8s

from kafleet_operator.policy import leases, shards
from kafleet_operator.policy.leases import Observed, Record, Timing

log = logging.getLogger("kafleet.operator")
MEMBER = "member"  # a member Lease is named <prefix>-member-<count>-<identity>
DEFAULT_TIMING = Timing()
SWEEP_DURATIONS = 20  # a member Lease unchanged this many durations is a gone pod's: deleted


def _record(lease: k8s.V1Lease) -> Record:
    spec = lease.spec or k8s.V1LeaseSpec()
    renewed = spec.renew_time.isoformat() if spec.renew_time else ""
    return Record(
        spec.holder_identity or "",
        spec.lease_duration_seconds or leases.DURATION_S,
        spec.lease_transitions or 0,
        renewed,
    )


class Elector:
    def __init__(
        self,
        identity: str,
        namespace: str,
        count: int,
        api: k8s.CoordinationV1Api,
        timing: Timing = DEFAULT_TIMING,
        prefix: str = shards.PREFIX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity, self.namespace, self.count = identity, namespace, count
        self.api, self.timing, self.prefix, self._clock = api, timing, prefix, clock
        self._observed: dict[str, Observed] = {}
        self._versions: dict[str, str] = {}
        self._renewed: dict[int, float] = {}  # shard -> when this pod last wrote it
        self._lock = threading.Lock()
        self._led: frozenset[int] = frozenset()

    @property
    def led(self) -> frozenset[int]:
        return self._led

    def owns(self, namespace: str, name: str) -> bool:
        """Whether this pod reconciles the group now: its shard is led and was renewed within
        the renew deadline (a pod that stalled between two steps does not act on a Lease that
        may be expiring in the others' eyes)."""
        return self._led_within(namespace, name, self.timing.renew_deadline_s)

    def holds(self, namespace: str, name: str) -> bool:
        """Whether the group's shard is led and was renewed within the Lease's duration: a pod
        whose renewals are late (a slow API server) stops writing at the renew deadline
        (``owns``), but no other pod may lead the shard before the duration has passed, so it
        keeps its memory of the group (its metric series) until then, and no longer."""
        return self._led_within(namespace, name, self.timing.duration_s)

    def _led_within(self, namespace: str, name: str, seconds: float) -> bool:
        """Whether the group's shard is led and this pod renewed it less than ``seconds`` ago."""
        shard = shards.shard_of(namespace, name, self.count)
        renewed = self._renewed.get(shard)
        return shard in self._led and renewed is not None and self._clock() - renewed < seconds

    # -- one step -------------------------------------------------------------------------

    def step(self) -> None:
        now = self._clock()
        found = {
            name: lease
            for lease in self.api.list_namespaced_lease(self.namespace).items
            if (name := _name(lease)).startswith(f"{self.prefix}-")
        }
        for name, lease in found.items():
            self._versions[name] = _version(lease)
            self._observed[name] = leases.seen(self._observed.get(name), _record(lease), now)
        for gone in set(self._observed) - set(found):
            self._observed[gone] = leases.seen(self._observed.get(gone), None, now)
        live = [name for name, seen in self._observed.items() if self._lives(seen, now)]
        members = sum(1 for name in live if name.startswith(self._member_prefix()))
        if self._member_name() not in live:
            members += 1  # this pod, whose member Lease is written after its shards' below
        share = math.ceil(self.count / members)
        shard_leases = [name for name in live if shards.parse_lease_name(name, self.prefix)]
        allowed = shards.may_lead(self.count, shard_leases, self.prefix)
        led = {s for s in self._led if allowed}
        for shard in range(self.count):
            name = shards.lease_name(shard, self.count, self.prefix)
            seen = self._observed.get(name, Observed(None, now))
            action = leases.decide(self.identity, seen, now, self.timing, self._renewed.get(shard))
            if action == "stand-down":
                # Late past the renew deadline: it has written nothing since (``owns``). The
                # Lease, read just now, is still its own, so it renews it, its resourceVersion
                # deciding against a pod taking it over at the same time; a pod alone would
                # otherwise stand down for good, and no one would lead the shard again.
                self._renewed.pop(shard, None)
                action = leases.decide(self.identity, seen, now, self.timing, None)
            wanted = action == "renew" or (action == "acquire" and len(led) < share)
            writing = self._clock()  # the others count the duration from after the write
            if allowed and wanted and self._write(name, seen, now):
                self._renewed[shard] = writing
                led.add(shard)
            else:  # another's, over this pod's share, or a write that lost: not led
                led.discard(shard)
        for extra in sorted(led, reverse=True)[: max(0, len(led) - share)]:
            self._release(extra)
            led.discard(extra)
        self._publish(frozenset(led))
        # The shards first: under a slow API server, their renewals are what must not be late.
        self._write(self._member_name(), self._observed.get(self._member_name()), now)
        self._sweep(now)

    def _lives(self, seen: Observed, now: float) -> bool:
        record = seen.record
        if record is None or not record.holder:
            return False
        return record.holder == self.identity or now - seen.changed_at < record.duration_s

    def _sweep(self, now: float) -> None:
        """Delete member Leases of pods gone long ago (a Deployment's pods are named anew on
        every restart): unchanged for ``SWEEP_DURATIONS`` of their durations."""
        for name, seen in list(self._observed.items()):
            record = seen.record
            if not name.startswith(f"{self.prefix}-{MEMBER}-") or record is None:
                continue
            if now - seen.changed_at >= SWEEP_DURATIONS * record.duration_s:
                try:
                    self.api.delete_namespaced_lease(name, self.namespace)
                except k8s.ApiException as exc:
                    if exc.status != 404:
                        raise
                del self._observed[name]

    def _member_prefix(self) -> str:
        """Members are counted per shard count: pods of another count lead none of these."""
        return f"{self.prefix}-{MEMBER}-{self.count}-"

    def _member_name(self) -> str:
        return f"{self._member_prefix()}{self.identity}"

    def _write(self, name: str, seen: Observed | None, now: float) -> bool:
        """Take or renew ``name``; False on a conflict (another pod wrote it first)."""
        renewed = datetime.datetime.now(datetime.UTC)
        record = leases.acquired(
            self.identity, seen.record if seen else None, self.timing, renewed.isoformat()
        )
        version = self._versions.get(name) if seen and seen.record else None
        body = self._body(name, record, version, renewed)
        try:
            if seen is None or seen.record is None:
                written = self.api.create_namespaced_lease(self.namespace, body)
            else:
                written = self.api.replace_namespaced_lease(name, self.namespace, body)
        except k8s.ApiException as exc:
            if exc.status in (409, 404):  # another pod was first, or it went: read again
                return False
            raise
        self._versions[name] = _version(written)
        self._observed[name] = Observed(_record(written), now)
        return True

    def _release(self, shard: int) -> None:
        name = shards.lease_name(shard, self.count, self.prefix)
        seen = self._observed.get(name)
        if seen is None or seen.record is None or seen.record.holder != self.identity:
            return
        body = self._body(name, leases.released(seen.record), self._versions.get(name), None)
        try:
            self.api.replace_namespaced_lease(name, self.namespace, body)
        except k8s.ApiException as exc:
            log.warning("releasing the Lease %s: %s", name, exc.reason)
        self._renewed.pop(shard, None)

    def release(self) -> None:
        """Leaving: give back every shard led and the member Lease."""
        for shard in sorted(self._led):
            self._release(shard)
        self._publish(frozenset())
        try:
            self.api.delete_namespaced_lease(self._member_name(), self.namespace)
        except k8s.ApiException as exc:
            if exc.status != 404:
                log.warning("deleting the member Lease: %s", exc.reason)

    def _publish(self, led: frozenset[int]) -> None:
        with self._lock:
            before, self._led = self._led, led
        if led != before:
            log.info(
                "%s leads shards %s of %d (was %s)",
                self.identity,
                sorted(led),
                self.count,
                sorted(before),
            )

    def _body(
        self, name: str, record: Record, version: str | None, renewed: datetime.datetime | None
    ) -> k8s.V1Lease:
        return k8s.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=k8s.V1ObjectMeta(
                name=name, namespace=self.namespace, resource_version=version
            ),
            spec=k8s.V1LeaseSpec(
                holder_identity=record.holder or None,
                lease_duration_seconds=record.duration_s,
                lease_transitions=record.transitions,
                renew_time=renewed,
            ),
        )


def _name(lease: k8s.V1Lease) -> str:
    return str(lease.metadata.name) if lease.metadata else ""


def _version(lease: k8s.V1Lease) -> str:
    return str(lease.metadata.resource_version) if lease.metadata else ""
