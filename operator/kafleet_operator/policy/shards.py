"""Shards: which operator leads which ConsumerGroups, when several operator pods share them.

Owns the rule, and nothing else:

- A group's shard is a stable hash of ``namespace/name`` (SHA-256, not Python's ``hash``,
  which changes between processes) modulo the configured shard count. Every pod, whatever
  its version, finds the same shard for the same group; a group keeps its shard for life
  while the count stays.
- Each shard has a Lease of its own, named for its number *and the count*
  (``<prefix>-3-of-4``): a leader of shard 3 of 4 reconciles exactly the groups that hash
  to 3 modulo 4, and no Lease of one count can be mistaken for a Lease of another.
- Changing the count changes every group's Lease (the count is in its name) and the shard
  number of most groups (``moved`` says which). So that no group is ever reconciled under two
  counts at once (two leaders writing one Deployment), a pod leads no shard of its count
  while any Lease of another count is still held and unexpired (``may_lead``): during a
  rollout that changes the count, the old pods go on leading under the old count, and the new
  ones start when the last old Lease is released or expires.

Pure: no I/O. Reading the Leases and keeping the shards led is the edge's.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

PREFIX = "kafleet-operator"


@functools.lru_cache(maxsize=65536)  # asked for every group at every pass
def shard_of(namespace: str, name: str, count: int) -> int:
    """The shard of the group ``namespace/name`` among ``count``."""
    if count < 1:
        raise ValueError(f"shards must be 1 or more, got {count}")
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def lease_name(shard: int, count: int, prefix: str = PREFIX) -> str:
    if not 0 <= shard < count:
        raise ValueError(f"shard {shard} is not one of {count}")
    return f"{prefix}-{shard}-of-{count}"


def parse_lease_name(name: str, prefix: str = PREFIX) -> tuple[int, int] | None:
    """(shard, count) of a shard's Lease name; None for any other name."""
    rest = name.removeprefix(f"{prefix}-")
    if rest == name:
        return None
    shard, sep, count = rest.partition("-of-")
    if not sep or not shard.isdigit() or not count.isdigit():
        return None
    number, total = int(shard), int(count)
    return (number, total) if 0 <= number < total else None


def may_lead(count: int, held: Iterable[str], prefix: str = PREFIX) -> bool:
    """Whether a pod configured for ``count`` shards may lead any of them, given the names of
    the shard Leases that are held and unexpired now."""
    for name in held:
        parsed = parse_lease_name(name, prefix)
        if parsed is not None and parsed[1] != count:
            return False
    return True


def moved(groups: Iterable[tuple[str, str]], before: int, after: int) -> list[tuple[str, str]]:
    """The groups whose shard number changes when the count goes from ``before`` to ``after``."""
    return [g for g in groups if shard_of(*g, before) != shard_of(*g, after)]
