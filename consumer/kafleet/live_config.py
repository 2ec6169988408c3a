"""Live tuning from a watched config file: new ``max_poll_records`` and ``concurrency`` without
a restart (a restart would rebalance the group).

Owns: noticing that the config file changed (it polls ``stat``, which also sees Kubernetes
ConfigMap volumes swap their ``..data`` symlink), loading and validating the new file, and
splitting the difference into what can be applied live and what needs a restart
(``config_changes``, pure). A bad new file is reported and ignored; the running configuration
stays. Does not own applying a change (``ParallelConsumer.tune``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafleet.config import TUNABLE_FIELDS, ConsumerConfig, load_config
from kafleet.errors import ConfigError

log = logging.getLogger(__name__)


def config_changes(old: ConsumerConfig, new: ConsumerConfig) -> tuple[dict[str, Any], list[str]]:
    """(tunable fields with their new values, other changed fields that need a restart)."""
    before, after = old.model_dump(), new.model_dump()
    changed = [name for name in after if before.get(name) != after[name]]
    live = {name: after[name] for name in changed if name in TUNABLE_FIELDS}
    restart = [name for name in changed if name not in TUNABLE_FIELDS]
    return live, restart


def _fingerprint(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks, as a ConfigMap volume's are
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)


class ConfigWatcher:
    """Polls ``path`` every ``interval_s``; calls ``apply(live_changes)`` when tunables change."""

    def __init__(
        self,
        path: Path,
        current: ConsumerConfig,
        apply: Callable[[dict[str, Any]], None],
        overrides: Mapping[str, Any] | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.path = path
        self.current = current
        self.apply = apply
        self.overrides = dict(overrides or {})
        self.interval_s = interval_s
        self._seen = _fingerprint(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafleet-config-watch", daemon=True)

    def start(self) -> ConfigWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def check(self) -> None:
        """Look once; apply what changed."""
        seen = _fingerprint(self.path)
        if seen is None or seen == self._seen:
            return
        self._seen = seen
        try:
            new = load_config(self.path, self.overrides)
        except ConfigError as exc:
            log.error(
                "ignoring the changed %s, keeping the running configuration: %s", self.path, exc
            )
            return
        live, restart = config_changes(self.current, new)
        if restart:
            log.warning("%s changed %s; those take effect after a restart", self.path, restart)
        if live:
            log.info("applying %s from %s without a restart", live, self.path)
            self.apply(live)
        self.current = self.current.model_copy(update=live)
