"""The consuming engine: from Kafka's records to handled, committed offsets.

Owns: the Poller (the one thread that owns the Kafka consumer, ``poller.py``, taking records in
with ``intake.py``, and at most once only after their commit, ``at_most_once.py``), the bounded
per-partition work queues and their runs (``work_queue.py``, ``partition_state.py``,
``dispatch.py``, ``ready_line.py``, ``runs.py``), the Executor and the handler kinds
(``executor.py``, ``function_runs.py``, ``coroutines.py``, ``handlers.py``, ``record.py``),
failures (``retry.py``, ``failure_policy.py``, ``dead_letter.py``), what may be committed
(``offsets.py``, ``commits.py``) and rebalances (``rebalance.py``).

Must not import: Spark shipping, the sidecar, the command line or the share-group consumer (they
are built on the engine, never the other way round); it reads ``config`` and writes its counters
to ``health``.
"""
