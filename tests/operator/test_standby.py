"""What a standby keeps ready for the groups other pods lead: one group an address chosen, the
address most groups share first, never one its own groups read, at most a few; and each chosen
cluster asked for nothing but its metadata, in the background, again after a while."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from kafleet_operator.reconcile import periodic, standby


def group(name: str, address: Any) -> dict[str, Any]:
    meta = {"namespace": "team", "name": name, "uid": f"u-{name}", "generation": 1}
    return {"metadata": meta, "spec": {"bootstrap_servers": address}, "status": {}}


def names(chosen: list[Any]) -> list[str]:
    return [body["metadata"]["name"] for body in chosen]


def test_one_group_an_address_is_chosen_the_address_most_groups_share_first() -> None:
    fleet = [group("b1", "b:9092"), group("a1", "a:9092"), group("a2", "a:9092")]
    assert names(standby.choose(fleet, set())) == ["a1", "b1"]


def test_an_address_this_pods_own_groups_read_is_not_chosen() -> None:
    fleet = [group("a1", "a:9092"), group("b1", "b:9092")]
    assert names(standby.choose(fleet, {"a:9092"})) == ["b1"]


def test_at_most_a_few_addresses_are_chosen_and_a_spec_without_one_is_left_out() -> None:
    fleet = [group(f"g{i}", f"host{i}:9092") for i in range(20)] + [group("odd", ["x:1"])]
    chosen = standby.choose(fleet, set(), most=8)
    assert len(chosen) == 8
    assert "odd" not in names(chosen)


class Target:
    def __init__(self, address: str) -> None:
        self.key = self.bootstrap = self.want = address


class Readers:
    """Stands in for the reading processes: records what each cluster was asked."""

    asked: ClassVar[dict[str, list[list[Any]]]] = {}

    def get(self, target: Target) -> Any:
        asked = Readers.asked.setdefault(target.key, [])

        class Reader:
            def read(self, wants: list[Any]) -> dict[str, Any]:
                asked.append(list(wants))
                return {}

        return Reader()

    def __len__(self) -> int:
        return len(Readers.asked)

    def drop(self, key: str) -> None:
        pass

    def sweep(self, busy: set[str]) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_standby_keeps_a_connection_to_each_cluster_of_the_groups_others_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two groups led elsewhere on cluster a, one on b, one led here on c: a and b are asked
    for nothing but their metadata, once a cluster (not once a group), at the first pass and
    again once EVERY_S has passed; c is read for its own group only."""
    monkeypatch.setattr(periodic.readers, "Readers", Readers)
    monkeypatch.setattr(standby, "EVERY_S", 3600.0)
    Readers.asked = {}
    bodies = [group("x1", "a"), group("x2", "a"), group("y", "b"), group("mine", "c")]

    def asked(key: str) -> int:
        return len(Readers.asked.get(key, []))

    async def until(done: Callable[[], bool]) -> None:
        for _ in range(100):
            if done():
                return
            await asyncio.sleep(0.05)

    async def passes() -> None:
        run = asyncio.ensure_future(
            periodic.run(
                {"all": bodies},
                lambda body, memo: None,
                lambda body, memo: Target(body["spec"]["bootstrap_servers"]),
                interval_s=0.05,
                observed=lambda body: body["metadata"]["name"] == "mine",
            )
        )
        await until(lambda: bool(asked("a") and asked("b") and asked("c") >= 3))
        assert (asked("a"), asked("b")) == (1, 1)  # one a cluster, however many groups
        monkeypatch.setattr(standby, "EVERY_S", 0.0)  # the next pass warms again
        await until(lambda: asked("a") >= 2 and asked("b") >= 2)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run

    asyncio.run(passes())
    assert asked("a") >= 2
    assert asked("b") >= 2
    assert all(wants == [] for key in "ab" for wants in Readers.asked[key])
    assert all(wants == ["c"] for wants in Readers.asked["c"])
