"""kafleet: a parallel, back-pressured Kafka consumer for slow work.

This module is the public surface: the names users import, listed in ``__all__``. Everything
else is internal and may move. The consumer itself (Poller, work queues, Executor, offset
tracking) arrives in ``poller.py``, ``work_queue.py``, ``executor.py`` and ``offsets.py``; the
command line lives in ``cli.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
