"""What the operator reads, and never writes: Kafka's offsets, Secrets, sidecars and its watches.

Owns: one Kafka view per cluster, read in a process of its own (``clusters.py``,
``readers.py``) into values (``snapshots.py``): the log offsets (``log_offsets.py``), the
committed ones (``committed.py``) and share groups' states (``share_lag.py``), the last two
through Kafka's Java admin where the operator has it (``java_admin.py``); a group's lag from
it (``lag_reader.py``), the credentials a ConsumerGroup names (``credentials.py``), its
sidecars' ``/status`` (``sidecars.py``, over kept-alive connections: ``http_pool.py``) and
what the watches hold of the groups and the objects they own (``watched.py``, kept by watches of
its own: ``informers.py``).

Must not import: the reconciling passes or the handlers; below it is only ``policy``.
"""
