"""kafleet: a parallel, back-pressured Kafka consumer for slow work.

This module is the public surface: the names users import, listed in ``__all__``. Everything
else is internal and may move. The parts: ``poller.py`` (the one thread that owns the Kafka
consumer), ``work_queue.py`` (bounded per-partition queues and ordering lanes), ``executor.py``
(runs the handler), ``offsets.py`` (what may be committed), wired by ``consumer.py``; the
command line lives in ``cli.py`` and ``worker.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafleet.config import ConsumerConfig, QueueBounds, RetryPolicy
    from kafleet.config_loading import load_config
    from kafleet.consumer import ParallelConsumer
    from kafleet.errors import (
        ConfigError,
        HandlerError,
        KafkaClientError,
        KafleetError,
        OffsetError,
    )
    from kafleet.record import Record
    from kafleet.security import Security

# Imported when first asked for, so ``kafleet sidecar`` does not load pydantic and librdkafka.
_HOME = {
    "ConsumerConfig": "kafleet.config",
    "QueueBounds": "kafleet.config",
    "RetryPolicy": "kafleet.config",
    "load_config": "kafleet.config_loading",
    "ParallelConsumer": "kafleet.consumer",
    "ConfigError": "kafleet.errors",
    "HandlerError": "kafleet.errors",
    "KafkaClientError": "kafleet.errors",
    "KafleetError": "kafleet.errors",
    "OffsetError": "kafleet.errors",
    "Record": "kafleet.record",
    "Security": "kafleet.security",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'kafleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "ConsumerConfig",
    "HandlerError",
    "KafkaClientError",
    "KafleetError",
    "OffsetError",
    "ParallelConsumer",
    "QueueBounds",
    "Record",
    "RetryPolicy",
    "Security",
    "__version__",
    "load_config",
]
