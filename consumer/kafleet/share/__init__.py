"""Share groups (KIP-932) with a strict record limit (KIP-1206), through Kafka's Java client.

confluent-kafka's share consumer speaks ShareFetch v1 only: no ``share.acquire.mode``, so
``max_poll_records`` would be a soft bound, and no share-group admin (no lag). Kafka's own Java
client has both; this package drives it in-process through JPype, one JVM per process, and
keeps confluent-kafka for everything else (the dead-letter producer).

Modules: ``jvm`` (the JVM and the client's jars), ``client`` (the Java share consumer and admin
in Python terms), ``outcomes`` (what a failed attempt leads to: the pure policy), ``attempts``
(a record's attempts on the pool, and the outcome each reports), ``pool`` (the handlers'
threads or event loop), ``member`` (one share consumer and the thread that owns it: polls,
acknowledgements, retrying the sink's writes), ``results`` (a poll's results written in one
attempt), ``state`` (the counts and the snapshot for the sidecar), ``share_consumer`` (all of
them wired, the group's configs and lag: ``ShareConsumer``).

Must not import: ``consumer.py``, the sidecar or the command line (the share consumer stands
beside the ParallelConsumer and the sidecar, not on them); it builds on the engine's handler
kinds, records and failure pieces, Spark shipping, ``health`` and ``config``.
"""
