"""kafleet_operator: the kopf operator that turns ConsumerGroup resources into worker fleets.

This module is the public surface. The handlers, the pure builders (Deployment, ConfigMap,
Service) and the scaling and tuning policies arrive in modules of their own; the consumer
library they deploy lives in the ``kafleet`` package.
"""

from __future__ import annotations

from kafleet import __version__

__all__ = ["__version__"]
