"""The sidecar: a worker's health and metrics over HTTP, judged from its state file.

Owns: the sidecar process (``server.py``; its command line: ``command.py``) and its bounded
HTTP server (``http_serving.py``; its idle kept-alive connections: ``keepalive.py``), the
Prometheus metrics (``metrics.py`` lists them, ``collector.py`` makes them from the state) and
the judgement of lag over a window (``lag.py``).

Must not import: the engine, Spark, the configuration model or the consumers (it must tell the
truth when the worker is hung or dead, so it reads only the state file, through ``health``),
nor pydantic, librdkafka or Spark.
"""
