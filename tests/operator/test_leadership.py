"""What leading a shard means inside one operator process, with a stand-in for the Lease edge
(the edge itself: ``test_elector.py``; whole processes: ``test_high_availability.py``): with no
shards every group is owned; a group of a shard not led is never written (the fence); a leaving
pod gives its Leases back only once its writes under way have ended, and writes nothing after;
kopf's last-handled configuration is stored only by the group's leader; the periodic pass
forgets the groups of shards it does not lead, and passes over, without forgetting, those of
a shard whose renewal is late."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from kafleet_operator import handlers
from kafleet_operator.policy import pause
from kafleet_operator.reading import watched
from kafleet_operator.reconcile import applying, leadership, periodic
from tests.operator.test_builders import example_spec


class Edge:
    """Leads the groups named in ``led``; records when it released."""

    def __init__(self, *led: str) -> None:
        self.led = set(led)
        self.late: set[str] = set()  # led, but a renewal is late: held, not owned
        self.released_at: float | None = None
        self.timing = None
        self.count = 2

    def owns(self, namespace: str, name: str) -> bool:
        return name in self.led and name not in self.late

    def holds(self, namespace: str, name: str) -> bool:
        return name in self.led

    def step(self) -> None:
        pass

    def release(self) -> None:
        self.released_at = time.monotonic()


@pytest.fixture
def edge() -> Iterator[Edge]:
    chosen = Edge("mine")
    leadership.start(chosen, 60)  # type: ignore[arg-type]
    yield chosen
    leadership.stop()
    leadership._elector, leadership._left = None, False


def group(name: str, uid: str = "u1", **status: Any) -> dict[str, Any]:
    meta = {"namespace": "team", "name": name, "uid": uid, "generation": 1}
    return {"metadata": meta, "spec": {}, "status": status}


def test_with_no_shards_this_process_owns_every_group() -> None:
    assert leadership.owns("team", "anything")


def test_a_group_of_a_shard_not_led_is_never_written(edge: Edge) -> None:
    with leadership.writing("team", "mine"):
        pass
    with (
        pytest.raises(leadership.NotLeaderError, match="team/theirs"),
        leadership.writing("team", "theirs"),
    ):
        pytest.fail("a write for a group of a shard not led")


def test_a_leaving_pod_releases_its_leases_after_its_writes_under_way_and_writes_no_more(
    edge: Edge,
) -> None:
    entered, ended = threading.Event(), []

    def slow_write() -> None:
        with leadership.writing("team", "mine"):
            entered.set()
            time.sleep(0.5)
            ended.append(time.monotonic())

    writer = threading.Thread(target=slow_write)
    writer.start()
    entered.wait(5)
    leadership.stop()
    writer.join()
    assert edge.released_at is not None
    assert edge.released_at >= ended[0]
    assert not leadership.owns("team", "mine")
    with pytest.raises(leadership.NotLeaderError):
        leadership.writing("team", "mine").__enter__()


def test_only_the_leader_stores_kopfs_last_handled_configuration(edge: Edge) -> None:
    storage = handlers.LedDiffBase(prefix="kafleet.io", key="last-handled-configuration")
    for name, stored in (("mine", True), ("theirs", False)):
        patch = kopf.Patch()
        storage.store(body=kopf.Body(group(name)), patch=patch, essence={"spec": {"a": 1}})  # type: ignore[arg-type]
        assert bool(patch) is stored, name


def test_the_pass_observes_only_the_groups_of_shards_led_and_handed_over_by_kopf(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watched, "ready", lambda namespace: namespace == "team")
    applying.listed.update({"u-mine", "u-theirs"})
    applying.reconciled.update({"u-mine", "u-theirs"})
    try:
        assert handlers.observed(group("mine", "u-mine"))
        assert not handlers.observed(group("theirs", "u-theirs"))
        assert "u-theirs" not in applying.reconciled  # adopted again if this pod comes to lead
        assert not handlers.observed(group("mine", "u-unlisted"))  # kopf has not resumed it
        # Not resumed yet, but its status says its generation is applied: a restart's resume
        # would change nothing, so the pass need not wait for it.
        assert handlers.observed(group("mine", "u-settled", appliedGeneration=1))
        failed = {"generation": 1, "reason": "ApplyFailed", "message": "no"}
        refused = group("mine", "u-refused", appliedGeneration=1, applyFailure=failed)
        assert not handlers.observed(refused)
    finally:
        applying.listed.clear()
        applying.reconciled.clear()


def test_the_pass_waits_until_the_watches_have_listed_the_groups_namespace(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Deployment not yet listed would be taken for one deleted (and put back)."""
    monkeypatch.setattr(watched, "ready", lambda namespace: False)
    applying.listed.add("u-mine")
    try:
        assert not handlers.observed(group("mine", "u-mine"))
        assert not handlers.observed(group("mine", "u-settled", appliedGeneration=1))
    finally:
        applying.listed.clear()


def test_a_group_of_a_shard_whose_renewal_is_late_is_passed_over_but_not_forgotten(
    edge: Edge,
) -> None:
    applying.listed.add("u-mine")
    applying.reconciled.add("u-mine")
    edge.late.add("mine")
    try:
        assert not handlers.observed(group("mine", "u-mine"))  # no write while late
        assert handlers.held(group("mine", "u-mine"))  # its memory and series are kept
        assert "u-mine" in applying.reconciled  # not adopted again once renewed
        assert not handlers.held(group("theirs", "u-theirs"))
    finally:
        applying.listed.clear()
        applying.reconciled.clear()


class Api:
    """The groups the API server holds now (by name), as adoption reads them again, and the
    reads made; there is no API server here, so any write would fail."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        self.reads: list[str] = []

    def latest(self, group: Any) -> dict[str, Any] | None:
        meta = group["metadata"]
        self.reads.append(meta["name"])
        found = self.groups.get(meta["name"])
        return found if found and found["metadata"]["uid"] == meta["uid"] else None


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    holds = Api()
    monkeypatch.setattr(applying.owned, "latest", holds.latest)
    yield holds
    applying.reconciled.clear()


def test_a_group_whose_generation_was_applied_is_adopted_without_a_read_or_a_write(
    edge: Edge, api: Api
) -> None:
    body = group("mine", "u-adopted", appliedGeneration=1)
    assert applying.adopt(body) == body  # a write would fail
    assert "u-adopted" in applying.reconciled
    assert api.reads == []  # thousands of settled groups after a restart cost no call


def test_a_group_is_adopted_as_the_api_server_holds_it_not_as_this_pods_copy(
    edge: Edge, api: Api
) -> None:
    """A standby's copy may be behind (CI: a group scaled to 8 while it stood by, its copy at
    5 and not yet applied; adopted from the copy, it was scaled down to 5). The API server's
    says generation 3 is applied: nothing is written, and the pass goes on with that."""
    copy = group("mine", "u-scaled", appliedGeneration=1)
    copy["metadata"]["generation"], copy["spec"] = 2, {"replicas": 5}
    now = group("mine", "u-scaled", appliedGeneration=3)
    now["metadata"]["generation"], now["spec"] = 3, {"replicas": 8}
    api.groups["mine"] = now

    assert applying.adopt(copy) == now  # a write (of 5 replicas) would fail
    assert "u-scaled" in applying.reconciled


def test_a_group_deleted_since_this_pods_copy_is_not_adopted(edge: Edge, api: Api) -> None:
    assert applying.adopt(group("mine", "u-gone", appliedGeneration=0)) is None
    api.groups["mine"] = group("mine", "u-made-again")
    assert applying.adopt(group("mine", "u-gone", appliedGeneration=0)) is None
    assert not applying.reconciled


class Series:
    """A group's metric series, as a memo holds them: closed when the memory is forgotten."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_pass_keeps_the_memory_of_a_held_group_and_forgets_the_others() -> None:
    bodies = [group(name, f"u-{name}") for name in ("led", "late", "gone")]
    state = {"led": True, "late": False, "gone": False}  # observed now?
    series: dict[str, Series] = {}

    def observe(body: Any, memo: dict[str, Any]) -> None:
        series.setdefault(body["metadata"]["name"], memo.setdefault("series", Series()))

    async def two_passes() -> None:
        run = asyncio.ensure_future(
            periodic.run(
                {"all": bodies},
                observe,
                lambda body, memo: None,  # no Kafka to read
                interval_s=0.05,
                observed=lambda body: state[body["metadata"]["name"]],
                kept=lambda body: body["metadata"]["name"] == "late",
            )
        )
        await asyncio.sleep(0.3)
        state.update(late=True, gone=True)  # every group observed once
        await asyncio.sleep(0.3)
        state.update(late=False, gone=False)  # then one late, one led elsewhere
        await asyncio.sleep(0.3)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run

    asyncio.run(two_passes())
    assert not series["led"].closed
    assert not series["late"].closed
    assert series["gone"].closed


class Writes:
    """The group's writes, as this pod makes them: the objects applied and the statuses
    patched, each through the fence; ``late_at`` names the write at which the renewal's
    deadline passes (from then on nothing is owned, until the test renews)."""

    def __init__(self, edge: Edge) -> None:
        self.edge, self.late_at = edge, ""
        self.applied: list[str] = []
        self.statuses: list[dict[str, Any]] = []

    def _write(self, what: str, name: str) -> None:
        if what == self.late_at:
            self.edge.late.add(name)
        with leadership.writing("team", name):
            pass

    def apply_all(self, body: Any, parsed: Any, held: Any) -> dict[str, Any]:
        self._write("objects", body.metadata["name"])
        self.applied.append(body.metadata["name"])
        return {"status": {}}

    def patch_status(self, body: Any, status: Any) -> dict[str, Any]:
        self._write("status", body["metadata"]["name"])
        self.statuses.append(dict(status))
        return {}


@pytest.fixture
def writes(edge: Edge, api: Api, monkeypatch: pytest.MonkeyPatch) -> Iterator[Writes]:
    """A pod leading "mine", whose writes are recorded; its pass observes nothing further
    than the adoption (``observer.observe_group`` is the pass's own, tested elsewhere)."""
    made = Writes(edge)
    monkeypatch.setattr(watched, "ready", lambda namespace: True)
    monkeypatch.setattr(applying.observer, "parse", lambda body, status, patch: object())
    monkeypatch.setattr(applying, "_apply_all", made.apply_all)
    monkeypatch.setattr(applying, "_applied", lambda body, patch, deployment: patch.status.update(
        appliedGeneration=body.metadata["generation"]))  # fmt: skip
    monkeypatch.setattr(applying.kube, "patch_status", made.patch_status)
    monkeypatch.setattr(applying.observer, "observe_group", lambda body, memo: None)
    yield made
    applying.listed.clear()
    applying._fenced.clear()
    applying._pauses.clear()
    pause.UNAPPLIED.clear()


def _pass(edge: Edge, api: Api, raw: dict[str, Any]) -> None:
    """The group's next pass, as the API server holds it, once this pod owns it again."""
    edge.late.clear()
    api.groups[raw["metadata"]["name"]] = raw
    if handlers.observed(raw):
        handlers.observe(raw, {})


def test_a_reconcile_fenced_mid_way_by_a_late_renewal_is_applied_by_the_pass_once_renewed(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """B9, 10,000 groups on 2 shards: a slow API server made a renewal late while kopf's
    create handlers ran; their writes were fenced, the shard stayed this pod's (no hand-over),
    and the groups stayed marked reconciled, so the pass never adopted them: 4 groups had no
    Deployment 20 minutes on. Fenced, a group is applied by the pass once this pod owns it."""
    raw = group("mine", "u-fenced")
    writes.late_at = "objects"
    with handlers._leading():  # as kopf's create handler runs it
        applying.reconcile(kopf.Body(raw), kopf.Body(raw).status, kopf.Patch(), retry=0)  # type: ignore[arg-type]
    assert writes.applied == []
    assert "u-fenced" not in applying.reconciled  # the pass adopts it once renewed
    assert not handlers.observed(raw)  # not while late

    writes.late_at = ""
    _pass(edge, api, raw)
    assert writes.applied == ["mine"]
    assert writes.statuses == [{"appliedGeneration": 1}]
    assert "u-fenced" in applying.reconciled


def test_a_reconcile_that_finds_the_renewal_late_before_it_writes_is_applied_by_the_pass(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """Late at the top (a resume after an upgrade, of a group whose status says applied):
    whatever its status says, the pass reconciles it once renewed, so the new objects land."""
    raw = group("mine", "u-resumed", appliedGeneration=1)
    edge.late.add("mine")
    with handlers._leading():
        applying.reconcile(kopf.Body(raw), kopf.Body(raw).status, kopf.Patch(), retry=0)  # type: ignore[arg-type]
    _pass(edge, api, raw)
    assert writes.applied == ["mine"]


def test_an_adoption_whose_status_write_is_fenced_is_adopted_again(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """Its objects applied, its status not: the next pass as leader adopts it again (before,
    it stayed marked reconciled with no ``appliedGeneration``: Reconciling for good)."""
    raw = group("mine", "u-adopted")
    applying.listed.add("u-adopted")
    writes.late_at = "status"
    api.groups["mine"] = raw
    handlers.observe(raw, {})
    assert writes.applied == ["mine"]
    assert writes.statuses == []

    writes.late_at = ""
    _pass(edge, api, raw)
    assert writes.applied == ["mine", "mine"]
    assert writes.statuses == [{"appliedGeneration": 1}]


def test_a_pause_change_fenced_mid_way_is_applied_again_by_the_pass(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """The same fence in a pause change: a group at rest has no other event, so the pass
    must be told to apply it again once this pod owns the group."""
    raw = group("mine", "u-paused")
    raw["spec"] = example_spec()
    applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    raw["metadata"]["annotations"] = {pause.PAUSED_REPLICAS: "2"}
    writes.late_at = "objects"
    with handlers._leading():
        applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    assert "u-paused" in pause.UNAPPLIED
    assert writes.applied == []

    edge.late.clear()
    writes.late_at = ""
    pause.UNAPPLIED.pop("u-paused")(kopf.Body(raw), kopf.Patch())  # as the pass runs it
    assert writes.applied == ["mine"]


def test_a_pause_change_that_comes_while_the_renewal_is_late_is_applied_by_the_pass(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """Before, a change seen while late was noted as seen and never applied (the fence only
    stopped changes already under way)."""
    raw = group("mine", "u-late-pause")
    raw["spec"] = example_spec()
    applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    edge.late.add("mine")
    raw["metadata"]["annotations"] = {pause.PAUSED_REPLICAS: "2"}
    with handlers._leading():
        applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
        applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    assert "u-late-pause" in pause.UNAPPLIED  # the second event did not note it as seen


def test_a_pod_that_loses_the_shard_drops_what_it_meant_to_write_for_its_groups(
    edge: Edge, api: Api, writes: Writes
) -> None:
    """A pause retry left from a fenced change must not run if this pod leads the group again
    later: the other leader may have moved its count meanwhile."""
    raw = group("mine", "u-lost")
    raw["spec"] = example_spec()
    applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    raw["metadata"]["annotations"] = {pause.PAUSED_REPLICAS: "2"}
    writes.late_at = "objects"
    with handlers._leading():
        applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    assert "u-lost" in pause.UNAPPLIED

    edge.led.discard("mine")  # the renewal failed: another pod leads the shard
    assert not handlers.observed(raw)
    assert "u-lost" not in pause.UNAPPLIED
    edge.led.add("mine")
    edge.late.clear()
    writes.late_at = ""
    with handlers._leading():
        applying.pause_changed("MODIFIED", kopf.Body(raw), kopf.Patch())  # type: ignore[arg-type]
    assert writes.applied == []  # the pause as it is now was noted on letting go: no change
