"""The operator's decisions, as pure functions: no I/O, no clients, no clocks of their own.

Owns: a ConsumerGroup's spec and its CRD (``spec.py``, ``crd.py``, ``structural.py``,
``pod_template.py``, ``autopilot.py``), the objects it owns (``builders.py``, and the pod in
``pod_spec.py``), its status conditions (``conditions.py``), pausing (``pause.py``), when to
apply again after a refusal (``apply_retry.py``), and the autopilot's policies: replicas from
lag (``scaling.py``), ``max_poll_records`` from measured processing (``tuning.py``) and what it
remembers between passes (``histories.py``). Each is tested exhaustively without a cluster.

Must not import: the operator's reading or reconciling, kopf, the Kubernetes client,
librdkafka or prometheus_client.
"""
