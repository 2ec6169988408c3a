"""Shipping handler results to a Spark job in batches, and committing only what was written.

Owns: cutting a partition's results into batches (``batcher.py``), the writer threads and their
retries (``shipping.py``), a batch as one Arrow table (``arrow_batches.py``), building the Spark
session (``session.py``), the user's job (``sink.py``; a Spark Connect server: ``connect.py``)
and Delta's idempotent writes (``delta_log.py``, ``delta_files.py``).

Must not import: the sidecar, the command line or the consumers that use it (``consumer.py``,
``share``); below it are the engine, ``health`` and ``config``.
"""
