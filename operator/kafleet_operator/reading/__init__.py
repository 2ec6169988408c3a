"""What the operator reads, and never writes: Kafka's offsets, Secrets, sidecars and its watches.

Owns: one Kafka view per cluster, read in a process of its own (``clusters.py``,
``readers.py``) into values (``snapshots.py``), a group's lag from it (``lag_reader.py``) and
a share group's (``share_lag.py``), the credentials a ConsumerGroup names (``credentials.py``),
its sidecars' ``/status`` (``sidecars.py``) and what the watches hold of the objects it owns
(``watched.py``).

Must not import: the reconciling passes or the handlers; below it is only ``policy``.
"""
