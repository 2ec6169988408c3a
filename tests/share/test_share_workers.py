"""Real ``kafleet worker`` processes in one share group: on a topic of ONE partition, three
workers all take records side by side (a consumer group would leave two idle), together
handling every record exactly once; and a worker killed with records in hand loses none of
them: their locks run out, the group delivers them again, and the other workers handle them
(a record is done twice only if the killed worker had it in hand)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafleet.health.state_file import read_json
from tests.conftest import TopicFactory, WorkerProcesses
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.share.conftest import share_group_assignments, share_group_lag

HANDLER = "tests.share.handlers:note_span"


@dataclass
class Spans:
    """What one worker's handler wrote: the records it took and those it finished."""

    started: Counter[int] = field(default_factory=Counter)
    ended: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def numbers(self) -> Counter[int]:
        return Counter(number for number, _, _ in self.ended)

    @property
    def in_hand(self) -> set[int]:
        """Taken more often than finished: still in its handler (or killed there)."""
        return {n for n, times in self.started.items() if times > self.numbers[n]}


def _spans(out: Path) -> Spans:
    spans = Spans()
    if not out.exists():
        return spans
    for line in out.read_text().splitlines():
        match line.split():
            case ["start", number, _]:
                spans.started[int(number)] += 1
            case ["end", number, started, ended]:
                spans.ended.append((int(number), float(started), float(ended)))
    return spans


@dataclass
class ShareWorker:
    process: subprocess.Popen[bytes]
    out: Path
    state: Path

    def spans(self) -> Spans:
        return _spans(self.out)

    def share_counts(self) -> dict[str, int]:
        state = read_json(self.state) or {}
        counts: dict[str, int] = state.get("share", {})
        return counts


def _start_workers(
    worker_processes: WorkerProcesses,
    count: int,
    topic: str,
    group: str,
    where: Path,
    classpath: str,
    delay: float,
) -> list[ShareWorker]:
    workers = []
    for index in range(count):
        out, state = where / f"out-{index}.txt", where / f"state-{index}.json"
        flags = [
            "--group-type",
            "share",
            "--share.classpath",
            classpath,
            "--max-poll-records",
            "3",
            "--concurrency",
            "3",
            "--processing-timeout-s",
            "5",  # the group's record lock: 5 s
            "--state-file",
            str(state),
            "--state-interval-ms",
            "200",
        ]
        env = {"KAFLEET_TEST_OUT": str(out), "KAFLEET_TEST_DELAY": str(delay)}
        process = worker_processes.start(topic, group, HANDLER, flags, env)
        workers.append(ShareWorker(process, out, state))
    return workers


def _all_assigned(kafka: str, group: str, topic: str, members: int) -> None:
    wait_until(
        lambda: sum(topic in a for a in share_group_assignments(kafka, group)) == members,
        180,
        f"{members} members of {group}, each assigned {topic}'s one partition",
        every=1.0,
    )


def _most_workers_at_once(spans: list[Spans]) -> int:
    """The most workers that had a record in their handlers at one moment."""
    events = sorted(
        (t, step, index)
        for index, worker in enumerate(spans)
        for _, started, ended in worker.ended
        for t, step in ((started, 1), (ended, -1))
    )
    active: Counter[int] = Counter()
    most = 0
    for _, step, index in events:
        active[index] += step
        most = max(most, sum(1 for n in active.values() if n > 0))
    return most


def test_three_workers_share_one_partition_and_handle_every_record_once(
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
    worker_processes: WorkerProcesses,
    share_classpath: str,
    tmp_path: Path,
) -> None:
    topic, group, total = topic_factory(partitions=1), group_id(), 600
    workers = _start_workers(
        worker_processes, 3, topic, group, tmp_path, share_classpath, delay=0.05
    )
    _all_assigned(kafka, group, topic, 3)

    produce(topic, total)
    wait_until(
        lambda: sum(len(w.spans().ended) for w in workers) >= total,
        180,
        f"all {total} records handled",
        every=0.2,
    )

    spans = [w.spans() for w in workers]
    assert all(s.ended for s in spans), [len(s.ended) for s in spans]
    assert _most_workers_at_once(spans) == 3
    assert sum((s.numbers for s in spans), Counter()) == Counter(range(total))
    wait_until(lambda: share_group_lag(kafka, group) == {(topic, 0): 0}, 90, "lag 0", every=1.0)
    for worker in workers:
        worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        assert worker.process.wait(timeout=90) == 0
    assert sum(w.share_counts()["redelivered"] for w in workers) == 0


def test_a_worker_killed_with_records_in_hand_loses_none_of_them(
    kafka: str,
    topic_factory: TopicFactory,
    group_id: Callable[[], str],
    produce: Callable[..., ProduceReport],
    worker_processes: WorkerProcesses,
    share_classpath: str,
    tmp_path: Path,
) -> None:
    topic, group, total = topic_factory(partitions=1), group_id(), 120
    workers = _start_workers(
        worker_processes, 3, topic, group, tmp_path, share_classpath, delay=1.0
    )
    _all_assigned(kafka, group, topic, 3)
    victim, survivors = workers[0], workers[1:]

    produce(topic, total)
    wait_until(
        lambda: len(victim.spans().ended) >= 6 and victim.spans().in_hand,
        120,
        "the first worker busy with records, after finishing some",
        every=0.05,
    )
    victim.process.kill()
    victim.process.wait()
    killed = victim.spans()
    wait_until(
        lambda: set(range(total)) <= set(sum((w.spans().numbers for w in workers), Counter())),
        180,
        "every record handled by someone",
        every=0.2,
    )

    handled = sum((w.spans().numbers for w in workers), Counter())
    done_by_survivors = sum((w.spans().numbers for w in survivors), Counter())
    twice = {n for n, times in handled.items() if times > 1}
    assert killed.in_hand, "the worker was killed between records"
    assert killed.in_hand <= set(done_by_survivors)  # they came back, to the others
    assert twice <= set(killed.started)  # done twice only if the killed worker had it
    assert len(twice) <= 3  # at most its one poll's records (max_poll_records 3)
    assert all(times <= 2 for times in handled.values()), handled.most_common(3)
    wait_until(
        lambda: (
            sum(w.share_counts().get("redelivered", 0) for w in survivors) >= len(killed.in_hand)
        ),
        60,
        "the survivors to count the killed worker's records as redelivered",
    )
    wait_until(lambda: share_group_lag(kafka, group) == {(topic, 0): 0}, 90, "lag 0", every=1.0)
