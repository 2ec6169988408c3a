"""What a worker says about itself, and how that is judged.

Owns: the worker's counters and the snapshot it publishes (``state.py``), the state file that
carries the snapshot to the sidecar (``state_file.py``), and the pure judgements of liveness and
readiness (``assessment.py``). The worker writes here and the sidecar reads here: the one
channel between them.

Must not import: any other part of kafleet, nor pydantic, librdkafka or Spark (the sidecar
loads this and must start fast and small).
"""
