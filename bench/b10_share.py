"""B10: a share group on one partition, next to a consumer group on it. One partition, a 5 ms
handler (``time.sleep``), every worker a ``kafleet worker`` process of its own (a share worker
runs Kafka's Java share consumer in an in-process JVM, one per process). A consumer group
gives a partition to one member: by partition it handles one record at a time (ideal 200/s),
unordered with concurrency 16 it is the best a consumer group does on one partition (ideal
3,200/s), and a second worker idles. A share group hands the partition's records to every
member, each fetch acquiring at most ``max_poll_records`` (16, ``record_limit``) records that
are acknowledged before the member's next poll; rows of 1, 2 and 4 share workers, each with
concurrency 16; then 1 worker of 4 share consumers (``share.consumers``, 4 records a poll
each: a member waits for its poll's records before it fetches again, so members side by side
overlap one's round trip with the others' handlers); then concurrency 64, where a share
member's poll brings 64 records (the consumer group's row first: "x cg unordered" compares
each row with the consumer group's of the same concurrency).

Every row starts its workers on an empty topic, waits until they are all in the group (the
state files; for a share group, also the group's description: every member assigned the
partition), then produces its records, so that joins and JVM starts do not count. Each
handler call writes the record's number and the time it ended to its worker's file: the rate
is from the first record handled to the last distinct one; the files also say whether every
record was handled exactly once (missing, duplicates) and how the records were spread over
the workers. Ideal = workers x concurrency / 5 ms (the handler-bound rate of what the row
deploys); "x cg unordered" is a row's rate over the consumer group's unordered row; largest
poll, polls, redelivered and refused acknowledgements come from the share workers' state
files, and "ms a poll" (members x seconds / polls) is a share member's mean time from one
poll to the next: 5 ms of handlers plus acknowledging and fetching again, the fixed cost a
share member pays for every ``max_poll_records`` records. The machine's busy share and the
CPU time per record of the row's workers and of the broker (from /proc, over the same span)
say whether a row was CPU-bound; the machine is shared (2 noisy cores), so read "cpu busy"
as the whole machine's, other tenants included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import RESULTS, Context, Table
from kafleet.engine.record import Record
from tests.infra import kafka as kafka_infra
from tests.infra import processes
from tests.infra.records import produce_numbered, record_number

WAIT_S = 0.005
CONCURRENCY = 16
WIDE = 64  # the concurrency (and a share poll's records) of the last rows
OUT_ENV = "B10_OUT"  # the folder each worker's handler writes its file in
REPO = Path(__file__).resolve().parent.parent
CLASSPATH = str(REPO / ".cache" / "share-client" / "4.3.1") + "/*"
JOIN_TIMEOUT_S = 120.0
STALL_S = 60.0  # no new record handled for this long: the row ends, what is missing is reported
LINGER_S = 3.0  # after the last record: time for a late duplicate to show
STOP_S = 30.0

# -- the handler, in the workers -------------------------------------------------------------

_lock = threading.Lock()
_out: TextIO | None = None


def handler(record: Record) -> None:
    """5 ms, then one line: the record's number and when its handler ended (CLOCK_MONOTONIC,
    the same clock in every process of the machine)."""
    global _out
    time.sleep(WAIT_S)
    line = f"{record_number(record.value or b'')} {time.monotonic():.6f}\n"
    with _lock:
        if _out is None:
            _out = open(Path(os.environ[OUT_ENV]) / f"handled-{os.getpid()}.txt", "a")  # noqa: SIM115
        _out.write(line)
        _out.flush()


# -- the rows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    label: str
    group_type: str  # consumer | share
    workers: int
    ordering: str
    concurrency: int
    count: int
    consumers: int = 1  # share consumers a worker (share.consumers)
    max_poll_records: int = CONCURRENCY

    @property
    def ideal(self) -> float:
        return self.workers * self.concurrency / WAIT_S


@dataclass
class Outcome:
    seconds: float
    distinct: int
    duplicates: int
    per_worker: list[int]
    share: dict[str, int]  # summed over the share workers (largest_poll: the largest)
    problems: list[str]
    cpu: Cpu


def _rows(ctx: Context) -> list[Row]:
    """Counts for 10-20 s a row on 2 cores (share rows made 400-1,800/s in trials)."""
    group, share = ctx.scale(30_000, 2_000), ctx.scale(14_000, 2_000)
    return [
        Row("consumer group, by partition", "consumer", 1, "partition", 1, ctx.scale(3_000, 400)),
        Row("consumer group, unordered", "consumer", 1, "unordered", CONCURRENCY, group),
        Row("consumer group, unordered", "consumer", 2, "unordered", CONCURRENCY, group),
        Row("share group", "share", 1, "unordered", CONCURRENCY, share),
        Row("share group", "share", 2, "unordered", CONCURRENCY, share),
        Row("share group", "share", 4, "unordered", CONCURRENCY, share),
        # A member waits for its poll's records before it fetches again: members side by
        # side overlap one's round trip with the others' handlers, but each poll costs CPU.
        Row("share group, 4 consumers a worker", "share", 1, "unordered", CONCURRENCY, share, 4, 4),
        # Bigger polls pay the round trip once for more records: 64 a poll, 64 handlers.
        Row("consumer group, unordered", "consumer", 1, "unordered", WIDE, 2 * group),
        Row("share group", "share", 1, "unordered", WIDE, 2 * share, 1, WIDE),
        Row("share group", "share", 2, "unordered", WIDE, 2 * share, 1, WIDE),
    ]


def run(ctx: Context) -> Table:
    table = Table(
        "b10",
        f"share group vs consumer group: 1 partition, {WAIT_S * 1000:g} ms a record, "
        f"concurrency {CONCURRENCY} or {WIDE} a worker (as many max_poll_records for share, "
        "unless the row says otherwise)",
        [
            "group",
            "workers",
            "ordering",
            "records",
            "seconds",
            "records/s",
            "ideal/s",
            "of ideal",
            "x cg unordered",
            "missing",
            "dupes",
            "per worker",
            "largest poll",
            "polls",
            "ms a poll",
            "redelivered",
            "acks refused",
            "cpu busy",
            "workers cpu ms/rec",
            "broker cpu ms/rec",
        ],
    )
    if not Path(CLASSPATH[:-1]).is_dir():
        raise RuntimeError(f"no share client jars in {CLASSPATH[:-2]}: make share-jars")
    session = kafka_infra.CACHE / "runs" / "bench-sessions" / f"session-{os.getpid()}" / "b10"
    logs = RESULTS / "b10-logs"
    shutil.rmtree(logs, ignore_errors=True)
    try:
        return _measure(ctx, table, session, logs)
    finally:
        _close_admin()


def _measure(ctx: Context, table: Table, session: Path, logs: Path) -> Table:
    baseline: float | None = None
    for index, row in enumerate(_rows(ctx)):
        folder = session / f"row-{index}"
        try:
            outcome = one_row(ctx, row, folder)
        except RuntimeError as exc:  # a worker exited, or the workers never joined: say so
            table.notes.append(f"row {index + 1} ({row.label}, {row.workers} workers): {exc}")
            continue
        finally:
            shutil.copytree(folder, logs / f"row-{index}", dirs_exist_ok=True)
        rate = outcome.distinct / outcome.seconds if outcome.seconds > 0 else 0.0
        if row.group_type == "consumer" and row.ordering == "unordered" and row.workers == 1:
            baseline = rate
        share = row.group_type == "share"
        polls = outcome.share.get("polls", 0)
        table.add(
            row.label,
            row.workers,
            row.ordering if row.ordering == "partition" else f"unordered, {row.concurrency}",
            row.count,
            outcome.seconds,
            rate,
            row.ideal,
            rate / row.ideal,
            rate / baseline if baseline else "-",
            row.count - outcome.distinct,
            outcome.duplicates,
            "/".join(str(n) for n in outcome.per_worker),
            outcome.share.get("largest_poll", "-") if share else "-",
            outcome.share.get("polls", "-") if share else "-",
            row.workers * row.consumers * outcome.seconds * 1000 / polls
            if share and polls
            else "-",
            outcome.share.get("redelivered", "-") if share else "-",
            outcome.share.get("acks_refused", "-") if share else "-",
            f"{outcome.cpu.busy:.0%}",
            outcome.cpu.workers_s * 1000 / row.count,
            outcome.cpu.broker_s * 1000 / row.count,
        )
        for problem in outcome.problems:
            table.notes.append(f"row {index + 1} ({row.label}, {row.workers} workers): {problem}")
    table.notes.append(
        "records/s: distinct records over the time from the first handled to the last; ideal: "
        "workers x concurrency / 5 ms; per worker: records each worker's handler ended"
    )
    table.notes.append(
        "ms a poll: workers x seconds / polls, a share member's mean time from one poll to the "
        "next (its 5 ms handlers, then acknowledging and the next fetch); cpu busy: the "
        "machine's, both cores, from producing to the last record; cpu ms/rec: CPU time (all "
        "threads) of the row's workers and of the broker in that time, per record"
    )
    table.notes.append(f"workers' logs and state files: {logs}")
    return table


def one_row(ctx: Context, row: Row, folder: Path) -> Outcome:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    topic = f"bench-b10-{uuid.uuid4().hex[:8]}"
    group = f"bench-b10-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
    env = {**os.environ, OUT_ENV: str(folder)}
    pids: list[int] = []
    problems: list[str] = []
    cpu = Cpu()
    try:
        for worker in range(row.workers):
            pids.append(
                processes.spawn(
                    _command(ctx, row, topic, group, folder, worker),
                    folder / f"worker-{worker}.log",
                    env,
                )
            )
        _wait_joined(ctx, row, group, folder, pids)
        before = _cpu_now(pids, folder)
        produce_numbered(ctx.bootstrap, topic, row.count, keys=1_000, value_size=100)
        _wait_handled(row, folder, pids, problems)
        cpu = _cpu_since(before, _cpu_now(pids, folder))
        time.sleep(LINGER_S)
    finally:
        _stop(pids, problems)
    return _outcome(row, folder, pids, problems, cpu)


def _stop(pids: list[int], problems: list[str]) -> None:
    """One SIGTERM to every worker at once (a second would make it exit at once, undrained),
    then SIGKILL for any still running after ``STOP_S``."""
    for pid in pids:
        if processes.alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for worker, pid in enumerate(pids):
        while processes.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if processes.alive(pid):
            problems.append(f"worker {worker} still ran {STOP_S:.0f} s after SIGTERM: killed")
            processes.kill(pid)


def _command(
    ctx: Context, row: Row, topic: str, group: str, folder: Path, worker: int
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "kafleet",
        "worker",
        "--log-level",
        "WARNING",
        "--bootstrap-servers",
        ctx.bootstrap,
        "--group-id",
        group,
        "--topics",
        topic,
        "--handler",
        "bench.b10_share:handler",
        "--ordering",
        row.ordering,
        "--concurrency",
        str(row.concurrency),
        "--state-file",
        str(folder / f"state-{worker}.json"),
        "--state-interval-ms",
        "200",
    ]
    if row.group_type == "share":
        cmd += [
            "--group-type",
            "share",
            "--share.classpath",
            CLASSPATH,
            "--share.consumers",
            str(row.consumers),
            "--share.acquire-mode",
            "record_limit",
            "--max-poll-records",
            str(row.max_poll_records),
        ]
    return cmd


def _states(folder: Path, workers: int) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    for worker in range(workers):
        try:
            out.append(json.loads((folder / f"state-{worker}.json").read_text()))
        except (OSError, ValueError):
            out.append(None)
    return out


def _check_alive(folder: Path, pids: list[int]) -> None:
    for worker, pid in enumerate(pids):
        if not processes.alive(pid):
            tail = (folder / f"worker-{worker}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"B10: worker {worker} exited; its log ends:\n{tail}")


def _wait_joined(ctx: Context, row: Row, group: str, folder: Path, pids: list[int]) -> None:
    """Every worker polled; a consumer group's partition assigned; every share member assigned
    the partition (the group's description)."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        _check_alive(folder, pids)
        states = _states(folder, row.workers)
        if all(s is not None and s.get("joined") for s in states):
            if row.group_type == "consumer":
                if sum(len(s.get("assigned", [])) for s in states if s) == 1:
                    return
            elif _share_members_assigned(ctx, group) >= row.workers * row.consumers:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"B10: the workers did not all join within {JOIN_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


_admin: Any = None


def _share_members_assigned(ctx: Context, group: str) -> int:
    """Members of the share group with a partition assigned (the Java admin, in this process's
    JVM: it runs no share consumer)."""
    global _admin
    from kafleet.share import jvm

    jvm.start(CLASSPATH, ["-Xmx128m"])
    if _admin is None:
        props = jvm.java("java.util.Properties")()
        props.setProperty("bootstrap.servers", ctx.bootstrap)
        _admin = jvm.java("org.apache.kafka.clients.admin.Admin").create(props)
    try:
        found = (
            _admin.describeShareGroups(jvm.java("java.util.List").of(group))
            .all()
            .get(10, jvm.java("java.util.concurrent.TimeUnit").SECONDS)
        )
    except Exception:  # noqa: BLE001 - not there yet
        return 0
    members = found.get(group).members()
    return sum(1 for m in members if not m.assignment().topicPartitions().isEmpty())


def _close_admin() -> None:
    global _admin
    if _admin is not None:
        from kafleet.share import jvm

        _admin.close(jvm.java("java.time.Duration").ofSeconds(5))
        _admin = None


def _read_handled(folder: Path) -> dict[str, list[tuple[int, float]]]:
    handled: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("handled-*.txt")):
        entries = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:  # a line being written is left for the next read
                entries.append((int(parts[0]), float(parts[1])))
        handled[path.stem.removeprefix("handled-")] = entries
    return handled


def _wait_handled(row: Row, folder: Path, pids: list[int], problems: list[str]) -> None:
    seen = 0
    progressed = time.monotonic()
    while True:
        distinct = len({n for entries in _read_handled(folder).values() for n, _ in entries})
        if distinct >= row.count:
            return
        if distinct > seen:
            seen, progressed = distinct, time.monotonic()
        elif time.monotonic() - progressed > STALL_S:
            problems.append(
                f"stalled: {distinct} of {row.count} records handled, none more in {STALL_S:.0f} s"
            )
            return
        _check_alive(folder, pids)
        time.sleep(0.25)


@dataclass
class Cpu:
    """From producing to the last record handled: the machine's busy share (both cores), and
    the CPU seconds the workers (all their threads, the JVM's too) and the broker used."""

    busy: float = 0.0
    workers_s: float = 0.0
    broker_s: float = 0.0


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int | None) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, TypeError):
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime


def _broker_pid(folder: Path) -> int | None:
    """The session's broker (its state is in the session folder, above B10's)."""
    try:
        pid = json.loads((folder.parent.parent / "broker.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None
    return int(pid) if pid else None


def _cpu_now(pids: list[int], folder: Path) -> tuple[int, int, float, float]:
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    workers = sum(_process_cpu_s(pid) for pid in pids)
    return sum(fields) - idle, sum(fields), workers, _process_cpu_s(_broker_pid(folder))


def _cpu_since(before: tuple[int, int, float, float], after: tuple[int, int, float, float]) -> Cpu:
    return Cpu(
        (after[0] - before[0]) / max(1, after[1] - before[1]),
        after[2] - before[2],
        after[3] - before[3],
    )


def _outcome(row: Row, folder: Path, pids: list[int], problems: list[str], cpu: Cpu) -> Outcome:
    handled = _read_handled(folder)
    firsts: dict[int, float] = {}
    calls: Counter[int] = Counter()
    for entries in handled.values():
        for number, at in entries:
            calls[number] += 1
            firsts[number] = min(at, firsts.get(number, at))
    duplicates = sum(c - 1 for c in calls.values())
    if duplicates:
        twice = sorted(n for n, c in calls.items() if c > 1)
        problems.append(f"{duplicates} duplicate handler calls, records {twice[:20]}")
    strays = [n for n in calls if not 0 <= n < row.count]
    if strays:
        problems.append(f"records outside 0..{row.count - 1}: {strays[:10]}")
    missing = sorted(set(range(row.count)) - set(calls))
    if missing:
        problems.append(f"{len(missing)} records never handled, first {missing[:20]}")
    starts = [at for entries in handled.values() for _, at in entries]
    seconds = max(firsts.values()) - min(starts) if starts else 0.0
    by_pid = {pid: len(handled.get(str(pid), [])) for pid in pids}
    share: dict[str, int] = {}
    for worker, state in enumerate(_states(folder, row.workers)):
        if state is None:
            problems.append(f"worker {worker} left no state file")
            continue
        if not state.get("stopped"):
            problems.append(f"worker {worker}'s last state is not a clean stop")
        for key, value in (state.get("share") or {}).items():
            if isinstance(value, int):
                share[key] = (
                    max(share.get(key, 0), value)
                    if key == "largest_poll"
                    else share.get(key, 0) + value
                )
    for worker in range(row.workers):
        log = (folder / f"worker-{worker}.log").read_text(errors="replace")
        noted = [ln for ln in log.splitlines() if " ERROR " in ln or " WARNING " in ln]
        if noted:
            problems.append(
                f"worker {worker} logged {len(noted)} warnings/errors, first: {noted[0][:300]}"
            )
    return Outcome(seconds, len(calls), duplicates, list(by_pid.values()), share, problems, cpu)
