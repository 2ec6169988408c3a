"""The benchmark harness: a context with a broker, and the tables that benchmarks return.

Owns: the broker for a run, table rendering (text for people, JSON for comparing runs), the
description of the machine a run happened on and of the code that ran (its commit), and the
measuring loops the benchmarks share (kafleet, the plain ``consume()`` loop and the
poll-then-process loop), each timed from the first record handled to the last so that group
joins do not count. Does not own any benchmark's workload.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from kafleet import ParallelConsumer, batch_handler, load_config
from kafleet.engine.handlers import kind_of
from tests.infra.records import produce_numbered

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Context:
    bootstrap: str
    quick: bool = False  # smaller workloads, for checking that a benchmark runs at all
    pods_bootstrap: str = ""  # the broker's listener for pods (B8's workers on the real node)

    def scale(self, full: int, quick: int) -> int:
        return quick if self.quick else full


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *row: object) -> None:
        self.rows.append(list(row))

    def render(self) -> str:
        cells = [[_fmt(c) for c in row] for row in [self.columns, *self.rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [f"{self.name}: {self.title}"]
        for n, row in enumerate(cells):
            lines.append(
                "  "
                + "  ".join(
                    c.rjust(w) if n and i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
            if n == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)

    def markdown(self) -> str:
        """The table as Markdown (numbers right-aligned), its notes as a list below."""
        lines = [f"**{self.name}: {self.title}**", ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("| --- |" + " ---: |" * (len(self.columns) - 1))
        lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in self.rows]
        return "\n".join([*lines, "", *(f"- {note}" for note in self.notes)]) + "\n"

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        path.write_text(
            json.dumps(
                {
                    **asdict(self),
                    "machine": machine(),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "commit": commit(),
                },
                indent=2,
            )
        )
        return path


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def commit() -> str | None:
    """The code that ran, as ``git describe --always --dirty`` names it (the commit, with
    ``-dirty`` if the work tree had changes); None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=RESULTS.parent,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def backlog(ctx: Context, partitions: int, count: int, keys: int = 10_000) -> str:
    """A new topic holding ``count`` records of ~100 bytes."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(timeout=30)
    produce_numbered(ctx.bootstrap, topic, count, keys=keys, value_size=100)
    return topic


def time_kafleet(
    ctx: Context, topic: str, count: int, handler: Callable[..., Any], **fields: Any
) -> float:
    """Seconds from the first record handled to the ``count``-th, with a fresh group. The
    handler may be of one record or a batch (``@batch_handler``), a function or a coroutine.

    Records are counted without a lock: ``next()`` of an ``itertools.count`` is atomic under
    the GIL, so counting adds about what the raw loop's ``seen += 1`` costs, not a lock per
    record that the raw loop does not pay (until 2026-11-29 it was a lock, about 0.15 µs a
    record charged to kafleet's record handler rows)."""
    tally = itertools.count(1)
    started: list[float] = []  # the first record's time (a rare race appends two: the min)
    finished = threading.Event()

    def count_up(records: int) -> None:
        if not started:
            started.append(time.monotonic())
        if records > 1:
            deque(itertools.islice(tally, records - 1), maxlen=0)
        if next(tally) >= count:
            finished.set()

    kind = kind_of(handler)
    counted: Callable[..., Any]
    if kind.coroutine:

        async def counted_async(item: Any) -> Any:
            result = await handler(item)
            count_up(len(item) if kind.batch else 1)
            return result

        counted = counted_async
    elif kind.batch:

        def counted_batch(item: Any) -> Any:
            result = handler(item)
            count_up(len(item))
            return result

        counted = counted_batch
    else:

        def counted_record(item: Any) -> Any:  # count_up's one-record case, inline: no call
            result = handler(item)
            if not started:
                started.append(time.monotonic())
            if next(tally) >= count:
                finished.set()
            return result

        counted = counted_record
    if kind.batch:
        counted = batch_handler(counted)
    config = load_config(
        None,
        {
            "bootstrap_servers": ctx.bootstrap,
            "group_id": f"bench-{uuid.uuid4().hex}",
            "topics": [topic],
            **fields,
        },
    )
    consumer = ParallelConsumer(config, counted).start()
    try:
        if not finished.wait(timeout=1800):
            handled = next(tally) - 1
            raise RuntimeError(f"kafleet handled {handled} of {count} records in 30 minutes")
        return time.monotonic() - min(started)
    finally:
        consumer.close(grace_s=5)


def time_poll_then_process(
    ctx: Context, topic: str, count: int, handler: Callable[[Any], Any] | None = None
) -> float:
    """The usual loop: consume a batch, handle it record by record, repeat. With no handler,
    the plain consume() loop (the ceiling). Timed from the first record to the ``count``-th."""
    consumer = Consumer(
        {
            "bootstrap.servers": ctx.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe([topic])
    seen, first = 0, None
    try:
        while seen < count:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error() is not None:
                    continue
                if first is None:
                    first = time.monotonic()
                if handler is not None:
                    handler(msg)
                seen += 1
        assert first is not None
        return time.monotonic() - first
    finally:
        consumer.close()
