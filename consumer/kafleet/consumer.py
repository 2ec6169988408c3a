"""``ParallelConsumer``: the Poller, the work queues, the Executor and the offset tracker, wired.

Owns: building the parts from one ``ConsumerConfig`` and a handler, their life cycle (start,
stop with a drain, join), live tuning of ``max_poll_records`` and ``concurrency``, and the
state snapshot. Thin on purpose: the behaviour lives in the modules it wires.

    from kafleet import ParallelConsumer, load_config

    def handle(record):               # or: async def handle(record)
        return {"id": ...}            # rows for the Spark job (config.spark), or None

    @kafleet.batch_handler            # or a batch at a time: the client's messages
    def handle_batch(messages):       # (sync or async), one result per message or None
        return [{"id": ...} for m in messages]

    with ParallelConsumer(load_config("worker.yaml"), handle) as consumer:
        consumer.wait()               # until stop() (or SIGTERM, in `kafleet worker`)
"""

from __future__ import annotations

import re
import threading
import time
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaException

from kafleet.config.model import ConsumerConfig
from kafleet.engine.dead_letter import DeadLetterWriter, ensure_topic, producer_config
from kafleet.engine.executor import Executor, ResultSink, ResultsSink
from kafleet.engine.handlers import Handler, TableRows
from kafleet.engine.offsets import OffsetTracker
from kafleet.engine.poller import Poller
from kafleet.engine.rebalance import OffsetStore
from kafleet.engine.record import of_message
from kafleet.engine.runs import Run
from kafleet.engine.work_queue import WorkQueues
from kafleet.errors import ConfigError, FieldProblem
from kafleet.health import assessment
from kafleet.health.state import Stats
from kafleet.health.state_file import StatePublisher
from kafleet.spark.batcher import BatchBounds
from kafleet.spark.jobs import Job
from kafleet.spark.shipping import Backoff, BatchWriter, Shipper
from kafleet.spark.sink import SparkSink


class ParallelConsumer:
    def __init__(
        self,
        config: ConsumerConfig,
        handler: Handler,
        *,
        on_result: ResultSink | None = None,
        offset_store: OffsetStore | None = None,
        sink: BatchWriter | None = None,
        job: Job | None = None,
    ) -> None:
        """``sink`` writes handler results in batches (default: a ``SparkSink`` when
        ``config.spark`` is set, running ``job`` if given); ``on_result`` is called with
        every result instead, and commits do not wait for it. A share group
        (``group_type: share``) is consumed by ``ShareConsumer``."""
        if config.group_type == "share":
            raise ConfigError(
                [FieldProblem("group_type", "share groups are consumed by kafleet.ShareConsumer")]
            )
        if sink is None and config.spark is not None:
            sink = SparkSink(config.spark, config.group_id, job, config.idempotent_writes)
        if offset_store is None and isinstance(sink, SparkSink) and config.spark is not None:
            offset_store = sink if config.spark.table else None
        if config.guarantee == "exactly-once" and offset_store is None:
            # The config holds spark.table with exactly-once (ConsumerConfig's own rule); what
            # it cannot know is a sink passed in code that cannot say where to resume.
            raise ConfigError(
                [
                    FieldProblem(
                        "guarantee",
                        f"exactly-once needs a sink that stores offsets with its output: "
                        f"{type(sink).__name__} does not; pass offset_store too",
                    )
                ]
            )
        self.config = config
        self.stats = Stats()
        self.sink = sink
        self.offsets = OffsetTracker(gated=sink is not None and config.guarantee != "at-most-once")
        self.queues = WorkQueues(config.queue, config.ordering, config.concurrency)
        self.shipper = None if sink is None else _shipper(config, sink, self)
        on_results: ResultsSink | None = None
        if self.shipper is not None:
            on_results = self.shipper.add
        elif on_result is not None:
            on_results = partial(_each, on_result)
        self.dead_letters = (
            DeadLetterWriter(
                producer_config(config),
                config.effective_dead_letter_topic,
                partial(ensure_topic, producer_config(config), config),
            )
            if config.on_failure == "dead-letter"
            else None
        )
        self.executor = Executor(
            handler, config, self.queues, self.offsets, self.stats, self.dead_letters, on_results
        )
        self.poller = Poller(
            config,
            self.queues,
            self.offsets,
            self.stats,
            offset_store,
            shipper=self.shipper,
            handler_p99=self.executor.recent_p99,
        )
        self.publisher = (
            StatePublisher(Path(config.state_file), config.state_interval_ms / 1000, self.snapshot)
            if config.state_file
            else None
        )
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> ParallelConsumer:
        if self._thread is not None:
            raise RuntimeError("this ParallelConsumer was started already")
        _judge_client_properties(self.config)
        if self.dead_letters is not None:  # most brokers do not create it on first use
            self.dead_letters.check_topic()
        if isinstance(self.sink, SparkSink):
            self.sink.session()  # fail now, clearly, rather than at the first batch
        if self.shipper is not None:
            self.shipper.start()
        self.executor.start()
        self._thread = threading.Thread(target=self.poller.run, name="kafleet-poller", daemon=True)
        self._thread.start()
        if self.publisher is not None:
            self.publisher.start()
        return self

    def stop(self, grace_s: float | None = None) -> None:
        """Stop intake, let queued and in-flight records finish for up to ``grace_s`` (default
        ``shutdown_grace_s``), commit, leave the group. Returns at once; see ``wait``."""
        self.poller.request_stop(self.config.shutdown_grace_s if grace_s is None else grace_s)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the consumer has closed; False if ``timeout`` ran out first."""
        if not self.poller.stopped.wait(timeout):
            return False
        if self.publisher is not None:  # a last write says "stopped"
            self.publisher.stop()
            self.publisher = None
        self.executor.stop()
        if self.shipper is not None:
            self.shipper.stop()
        if isinstance(self.sink, SparkSink):
            self.sink.close()
        if self.dead_letters is not None:
            self.dead_letters.close()
        return True

    @property
    def error(self) -> BaseException | None:
        """What stopped the consumer, if it stopped on an error."""
        return self.poller.error

    def close(self, grace_s: float | None = None) -> None:
        self.stop(grace_s)
        self.wait()
        if self.poller.error is not None:
            raise self.poller.error

    def __enter__(self) -> ParallelConsumer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- live tuning -----------------------------------------------------------------------

    def tune(self, *, max_poll_records: int | None = None, concurrency: int | None = None) -> None:
        """Change ``max_poll_records`` and/or ``concurrency`` now: no restart, no rebalance."""
        if max_poll_records is not None:
            if not 1 <= max_poll_records <= self.config.queue.max_records:
                raise ConfigError(
                    [
                        FieldProblem(
                            "max_poll_records", f"must be 1 to {self.config.queue.max_records}"
                        )
                    ]
                )
            self.poller.max_poll_records = max_poll_records
        if concurrency is not None:
            if not 1 <= concurrency <= 10_000:
                raise ConfigError([FieldProblem("concurrency", "must be 1 to 10000")])
            self.executor.resize(concurrency)

    # -- state -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything the sidecar serves, as JSON-ready data."""
        queues = self.queues.snapshot()
        abandoned, oldest_abandoned = self.queues.abandoned()
        offsets = self.offsets.snapshot()
        partitions = {}
        log_ends = self.poller.log_ends
        for tp in sorted(set(queues) | set(offsets)):
            committed, committable, in_progress = offsets.get(tp, (None, None, 0))
            log_end, fetched = log_ends.get(tp, (None, None))
            partitions[f"{tp[0]}[{tp[1]}]"] = {
                "topic": tp[0],
                "partition": tp[1],
                "committed": committed,
                "position": committable,
                "log_end": log_end,
                "fetch_position": fetched if fetched is not None and fetched >= 0 else None,
                "in_progress": in_progress,
                **queues.get(
                    tp,
                    {
                        "queued": 0,
                        "queued_bytes": 0,
                        "in_flight": 0,
                        "held": 0,
                        "paused": False,
                        "stopped": None,
                        "revoking": False,
                        "oldest_in_flight_s": 0.0,
                    },
                ),
            }
        snapshot: dict[str, Any] = {
            "group_id": self.config.group_id,
            "joined": self.poller.joined,
            "max_poll_interval_ms": self.config.max_poll_interval_ms,
            "processing_timeout_s": self.config.processing_timeout_s,
            "fetch_stall_timeout_ms": self.poller.fetch_watch.timeout_ms,  # 0: not watched
            "stalled_partitions": self.poller.fetch_watch.snapshot(),
            "assigned": [f"{t}[{p}]" for t, p in self.poller.assignment],
            "partitions": partitions,
            "in_flight": self.queues.in_flight,
            "abandoned_in_flight": abandoned,
            "oldest_abandoned_s": oldest_abandoned,
            "max_poll_records": self.poller.max_poll_records,
            "concurrency": self.queues.concurrency,
            "ordering": self.config.ordering,
            "guarantee": self.config.guarantee,
            **self.stats.as_dict(),
        }
        if self.shipper is not None:
            sink = self.sink
            where = sink.where if isinstance(sink, SparkSink) else type(sink).__name__
            snapshot["sink"] = {"where": where, **self.shipper.snapshot()}
        # The same judgement the sidecar makes, on a state that is fresh by definition.
        now = time.time()
        verdict = assessment.liveness({**snapshot, "written_at": now}, now, started_at=now)
        snapshot["healthy"], snapshot["unhealthy_reasons"] = verdict.ok, verdict.reasons
        return snapshot


def _shipper(config: ConsumerConfig, sink: BatchWriter, parts: ParallelConsumer) -> Shipper:
    spark = config.spark
    bounds = BatchBounds()
    writers, backoff = 1, Backoff()
    if spark is not None:
        bounds = BatchBounds(
            spark.batch.max_records, spark.batch.max_bytes, spark.batch.linger_ms / 1000
        )
        writers = spark.writers
        backoff = Backoff(spark.retry_backoff_ms / 1000, spark.max_retry_backoff_ms / 1000)
    return Shipper(sink, bounds, parts.offsets, parts.queues, parts.stats, writers, backoff)


def _each(on_result: ResultSink, run: Run, pairs: list[tuple[Any, Any]] | TableRows) -> None:
    if isinstance(pairs, TableRows):  # a batch handler's table: each row as a dict
        rows = pairs.table.to_pylist()
        pairs = [(of_message(*run.tp, m), row) for m, row in zip(pairs.messages, rows, strict=True)]
    for record, result in pairs:
        on_result(record, result)


QUOTED = re.compile(r'"([^"]+)"')  # the property librdkafka's refusal names


def _judge_client_properties(config: ConsumerConfig) -> None:
    """librdkafka's own judgement of the client's properties, before anything starts (a client
    made and closed at once, joining no group): values under ``kafka`` reach librdkafka as
    given, and only it knows each one's type and range. A refusal is a ``ConfigError`` naming
    the field (``kafka.<property>``), not the Poller's traceback after the start."""
    try:
        Consumer(config.librdkafka()).close()
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args else str(exc)
        named = QUOTED.search(reason)
        name = named.group(1) if named else None
        field = f"kafka.{name}" if name in config.kafka else "kafka"
        raise ConfigError([FieldProblem(field, reason)]) from None
