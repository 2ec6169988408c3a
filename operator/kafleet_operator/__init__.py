"""kafleet_operator: the kopf operator that turns ConsumerGroup resources into worker fleets.

This module is the public surface (the version). The layers, each importing only from those
after it (``pyproject.toml``'s import contracts): ``main.py`` (``kafleet operator``),
``handlers.py`` (the kopf handlers, shims only), ``reconcile`` (the passes, steps and writes),
``reading`` (what it reads of Kafka, Secrets, pods and its watches) and ``policy`` (pure
decisions). The consumer library the fleet runs is the ``kafleet`` package.
"""

from __future__ import annotations

from kafleet import __version__

__all__ = ["__version__"]
