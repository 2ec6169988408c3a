"""kafleet: a parallel, back-pressured Kafka consumer for slow work.

This module is the public surface: the names users import, listed in ``__all__``. Everything
else is internal and may move. The packages, each a layer above the next (``pyproject.toml``'s
import contracts, checked by ``make lint``): ``cli`` (the command line); ``consumer.py`` (the
ParallelConsumer, wiring the engine to Spark), ``share`` (the ShareConsumer) and ``sidecar``;
``spark`` (results in batches to a Spark job); ``engine`` (the Poller, the work queues, the
Executor, the offsets); ``health`` (the worker's state and its judgement) and ``config`` (the
one configuration model); ``errors.py`` (the error tree).
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafleet.config.loading import load_config
    from kafleet.config.model import ConsumerConfig
    from kafleet.config.queue_bounds import QueueBounds
    from kafleet.config.retry_policy import RetryPolicy
    from kafleet.config.security import Security
    from kafleet.consumer import ParallelConsumer
    from kafleet.engine.handlers import batch_handler
    from kafleet.engine.record import Record
    from kafleet.errors import (
        ConfigError,
        HandlerError,
        KafkaClientError,
        KafleetError,
        OffsetError,
    )
    from kafleet.share.share_consumer import ShareConsumer

# Imported when first asked for, so ``kafleet sidecar`` does not load pydantic and librdkafka.
_HOME = {
    "ConsumerConfig": "kafleet.config.model",
    "QueueBounds": "kafleet.config.queue_bounds",
    "RetryPolicy": "kafleet.config.retry_policy",
    "load_config": "kafleet.config.loading",
    "ParallelConsumer": "kafleet.consumer",
    "ShareConsumer": "kafleet.share.share_consumer",
    "ConfigError": "kafleet.errors",
    "HandlerError": "kafleet.errors",
    "KafkaClientError": "kafleet.errors",
    "KafleetError": "kafleet.errors",
    "OffsetError": "kafleet.errors",
    "Record": "kafleet.engine.record",
    "Security": "kafleet.config.security",
    "batch_handler": "kafleet.engine.handlers",
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
    "ShareConsumer",
    "__version__",
    "batch_handler",
    "load_config",
]
