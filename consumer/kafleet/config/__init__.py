"""The configuration: one frozen pydantic model judged once, at the edge.

Owns: the worker's settings and every rule about them (``model.py``, with its parts beside it:
the queue bounds, the retry policy, the Spark, share-group and security sections, the rules
across fields and the librdkafka properties), loading them from a file, the environment and
flags (``loading.py``), their reference table (``doc.py``), and importing the user's code a
setting names (``imports.py``). The operator judges a ConsumerGroup's spec with the same model.

Must not import: anything of kafleet but ``errors`` (the engine, Spark, the sidecar and the
command line all read the configuration; it reads none of them), nor librdkafka or Spark.
"""
