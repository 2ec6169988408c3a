"""``ShareConsumer``: a worker's share consumers, the handlers' pool and the state, wired.

Owns: the life cycle of share mode (``group_type: share``): start the JVM, check the Java
client's properties, set the group's configs (its record lock from ``processing_timeout_s``,
its delivery limit, where a new group starts), open ``share.consumers`` members and the pool
their records run on (unordered: a share group has no order to keep), write a poll's results
to the sink in one attempt when a member asks (the member retries), live tuning of
``max_poll_records`` and ``concurrency``, the group's lag (read through the admin API every
few seconds), a failed member's error (the worker's exit code), and the state snapshot the
sidecar serves. Same surface as ``ParallelConsumer``.

Does not own the member's loop (``member.py``), a record's attempts (``attempts.py``), the
Java calls (``client.py``) or the policy (``outcomes.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from kafleet.config.model import ConsumerConfig
from kafleet.config.share import admin_properties, java_properties, lock_ms
from kafleet.engine.dead_letter import DeadLetterWriter, ensure_topic, producer_config
from kafleet.engine.handlers import Handler, kind_of
from kafleet.engine.record import Record
from kafleet.errors import ConfigError, FieldProblem
from kafleet.health.state import Stats
from kafleet.health.state_file import StatePublisher
from kafleet.share import jvm
from kafleet.share.attempts import Attempts, ResultSink
from kafleet.share.client import ShareAdmin, ShareClient, ShareClientError, ShareRecord
from kafleet.share.member import Member
from kafleet.share.pool import CoroutinePool, ThreadPool
from kafleet.share.results import write_results
from kafleet.share.state import ShareCounts, snapshot
from kafleet.spark.shipping import Backoff, BatchWriter
from kafleet.spark.sink import SparkSink

log = logging.getLogger(__name__)
LAG_EVERY_S = 5.0


class ShareConsumer:
    def __init__(
        self,
        config: ConsumerConfig,
        handler: Handler,
        *,
        on_result: ResultSink | None = None,
        sink: BatchWriter | None = None,
    ) -> None:
        if config.group_type != "share":
            raise ConfigError([FieldProblem("group_type", "ShareConsumer needs share")])
        self.kind = kind_of(handler)
        if self.kind.batch:
            raise ConfigError(
                [
                    FieldProblem(
                        "handler",
                        "share groups run handlers of one record (a batch handler's messages "
                        "are confluent-kafka's; share records come from the Java client)",
                    )
                ]
            )
        if sink is None and config.spark is not None:
            sink = SparkSink(config.spark, config.group_id, None, False)
        self.config = config
        self.handler: Any = handler
        self.sink = sink
        self.on_result = on_result
        self.stats = Stats()
        self.counts = ShareCounts()
        self.lock_s = lock_ms(config) / 1000
        self.max_poll_records = config.max_poll_records
        self.concurrency = config.concurrency
        self.lag: dict[tuple[str, int], int | None] = {}
        self.dead_letters = DeadLetterWriter(
            producer_config(config),
            config.effective_dead_letter_topic,
            lambda timeout: ensure_topic(producer_config(config), config, timeout),
        )
        self.attempts = Attempts(
            handler,
            config,
            self.stats,
            self.counts,
            self.dead_letters,
            keep_results=sink is not None,
            on_result=on_result,
        )
        self.members: list[Member] = []
        self._pool: ThreadPool | CoroutinePool | None = None
        self._admin: ShareAdmin | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.publisher = (
            StatePublisher(Path(config.state_file), config.state_interval_ms / 1000, self.snapshot)
            if config.state_file
            else None
        )

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> ShareConsumer:
        if self.members:
            raise RuntimeError("this ShareConsumer was started already")
        if self.publisher is not None:  # the sidecar sees a live worker while the JVM starts
            self.publisher.start()
        try:
            return self._start()
        except BaseException:
            if self.publisher is not None:  # a last state says "stopped"
                self.publisher.stop()
                self.publisher = None
            raise

    def _start(self) -> ShareConsumer:
        config = self.config
        jvm.start(config.share.classpath, config.share.jvm_options)
        ShareClient.check(java_properties(config, self.max_poll_records))
        self._admin = ShareAdmin(admin_properties(config))
        if config.share.configure_group:
            self._configure_group(self._admin)
        self.dead_letters.check_topic()
        if isinstance(self.sink, SparkSink):
            self.sink.session()
        name = "kafleet-share-handler"
        self._pool = (
            CoroutinePool(self.concurrency, name)
            if self.kind.coroutine
            else ThreadPool(self.concurrency, name)
        )
        for index in range(config.share.consumers):
            member = Member(
                index,
                self._open_client,
                self._dispatch,
                self.counts,
                max_poll_records=self.max_poll_records,
                poll_interval_s=config.poll_interval_ms / 1000,
                lock_s=self.lock_s,
                delivery_limit=config.share.delivery_limit,
                write_results=self._write_results if self.sink is not None else None,
                backoff=_sink_backoff(config),
                park=self.attempts.park,
                accept_first=config.guarantee == "at-most-once",
            )
            self.members.append(member)
            self._spawn(member.run, f"kafleet-share-{index}")
        self._spawn(self._watch, "kafleet-share-watch")
        return self

    def _configure_group(self, admin: ShareAdmin) -> None:
        share = self.config.share
        configs = {
            "share.record.lock.duration.ms": str(int(self.lock_s * 1000)),
            "share.delivery.count.limit": str(share.delivery_limit),
            "share.auto.offset.reset": self.config.auto_offset_reset,
        }
        try:
            admin.set_group_configs(self.config.group_id, configs, 30.0)
        except ShareClientError as exc:
            field = (
                "processing_timeout_s"
                if "lock.duration" in str(exc)
                else "share.delivery_limit"
                if "delivery.count" in str(exc)
                else "auto_offset_reset"
                if "offset.reset" in str(exc)
                else "share"
            )
            raise ConfigError(
                [FieldProblem(field, f"the broker refused the share group's configs: {exc}")]
            ) from exc

    def _open_client(self, max_poll_records: int) -> ShareClient:
        return ShareClient(java_properties(self.config, max_poll_records), self.config.topics)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, grace_s: float | None = None) -> None:
        """Stop polling, let records in handlers finish for up to ``grace_s`` (default
        ``shutdown_grace_s``; the rest are released for another member), acknowledge, leave."""
        grace = self.config.shutdown_grace_s if grace_s is None else grace_s
        self._stopping.set()
        for member in self.members:
            member.request_stop(grace)

    def wait(self, timeout: float | None = None) -> bool:
        if not self.stopped.wait(timeout):
            return False
        if self.publisher is not None:
            self.publisher.stop()
            self.publisher = None
        if self._pool is not None:
            self._pool.stop()
        if isinstance(self.sink, SparkSink):
            self.sink.close()
        self.dead_letters.close()
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        return True

    def close(self, grace_s: float | None = None) -> None:
        self.stop(grace_s)
        self.wait()
        if self.error is not None:
            raise self.error

    def __enter__(self) -> ShareConsumer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _watch(self) -> None:
        """Read the lag now and then; stop every member when one fails; say when all ended."""
        next_lag = 0.0
        while not all(m.stopped.is_set() for m in self.members):
            self._note_failure()
            if time.monotonic() >= next_lag and self._admin is not None:
                next_lag = time.monotonic() + LAG_EVERY_S
                try:
                    self.lag = self._admin.lag(self.config.group_id, 10.0)
                except ShareClientError as exc:
                    log.warning("could not read the share group's lag: %s", exc)
            time.sleep(0.1)
        self._note_failure()  # a member that failed and ended within one turn
        self.stopped.set()

    def _note_failure(self) -> None:
        """The first member's error is the consumer's; the others stop within the grace."""
        failed = next((m.error for m in self.members if m.error is not None), None)
        if failed is not None and self.error is None:
            self.error = failed
            self.stats.fatal_error = str(failed)
            if not self._stopping.is_set():
                self.stop()

    # -- live tuning -----------------------------------------------------------------------

    def tune(self, *, max_poll_records: int | None = None, concurrency: int | None = None) -> None:
        """``max_poll_records`` applies at each member's next poll (its client is reopened,
        with nothing acquired); ``concurrency`` at once."""
        consumers = self.config.share.consumers
        wanted = max_poll_records or self.max_poll_records
        if consumers * wanted > (concurrency or self.concurrency):
            raise ConfigError(
                [
                    FieldProblem(
                        "max_poll_records",
                        f"share.consumers x max_poll_records ({consumers * wanted}) must not "
                        f"exceed concurrency ({concurrency or self.concurrency})",
                    )
                ]
            )
        if max_poll_records is not None:
            if not 1 <= max_poll_records <= 100_000:
                raise ConfigError([FieldProblem("max_poll_records", "must be 1 to 100000")])
            self.max_poll_records = max_poll_records
            for member in self.members:
                member.max_poll_records = max_poll_records
        if concurrency is not None:
            if not 1 <= concurrency <= 10_000:
                raise ConfigError([FieldProblem("concurrency", "must be 1 to 10000")])
            self.concurrency = concurrency
            if self._pool is not None:
                self._pool.resize(concurrency)

    def _dispatch(self, record: ShareRecord, member: Member) -> None:
        pool = self._pool
        if isinstance(pool, CoroutinePool):
            pool.submit(lambda: self.attempts.run_async(record, member))
        elif pool is not None:
            pool.submit(lambda: self.attempts.run(record, member))

    # -- results ---------------------------------------------------------------------------

    def _write_results(self, pairs: list[tuple[Record, Any]]) -> list[tuple[Record, Exception]]:
        assert self.sink is not None
        return write_results(self.sink, self.stats, pairs)

    # -- state -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything the sidecar serves, as JSON-ready data."""
        where = None
        if self.sink is not None:
            where = (
                self.sink.where if isinstance(self.sink, SparkSink) else type(self.sink).__name__
            )
        return snapshot(self, where)


def _sink_backoff(config: ConsumerConfig) -> Backoff:
    """The waits between a sink's attempts, as ``spark.retry_backoff_ms`` says."""
    spark = config.spark
    if spark is None:
        return Backoff()
    return Backoff(spark.retry_backoff_ms / 1000, spark.max_retry_backoff_ms / 1000)
