"""Live tuning from a watched config file: new ``max_poll_records`` and ``concurrency`` without
a restart (a restart would rebalance the group).

Owns: noticing that the config file changed (it polls ``stat``, which also sees Kubernetes
ConfigMap volumes swap their ``..data`` symlink), loading and validating the new file, and
splitting the difference into what can be applied live and what needs a restart
(``config_changes``, pure). A change that cannot be taken (a file that does not load, or a
value the running consumer refuses, such as ``max_poll_records`` above the running
``queue.max_records``, which changes only with a restart) is rejected: logged, reported to
``Stats`` (so the state, the sidecar's ``/status`` and ``kafleet_config_rejected*`` say so), and
the running configuration stays. Whatever happens, the watch goes on: the next change is
looked at. Does not own applying a change (``ParallelConsumer.tune``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafleet.config.loading import load_config
from kafleet.config.model import TUNABLE_FIELDS, ConsumerConfig
from kafleet.errors import ConfigError
from kafleet.health.state import Stats

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
        stats: Stats | None = None,
    ) -> None:
        self.path = path
        self.current = current
        self.apply = apply
        self.overrides = dict(overrides or {})
        self.interval_s = interval_s
        self.stats = stats
        self._seen = _fingerprint(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafleet-config-watch", daemon=True)

    def start(self) -> ConfigWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def watching(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:  # a surprise must not end the watch: say so, go on
                log.exception("could not take the changed %s", self.path)
                self._report(f"{type(exc).__name__}: {exc}")

    def check(self) -> None:
        """Look once; apply what changed, or reject it and say why."""
        seen = _fingerprint(self.path)
        if seen is None or seen == self._seen:
            return
        self._seen = seen
        try:
            new = load_config(self.path, self.overrides)
        except ConfigError as exc:
            log.error(
                "rejected the changed %s, the running configuration stays: %s", self.path, exc
            )
            self._report(str(exc))
            return
        live, restart = config_changes(self.current, new)
        if restart:
            log.warning("%s changed %s; those take effect after a restart", self.path, restart)
        if live:
            log.info("applying %s from %s without a restart", live, self.path)
            try:
                self.apply(live)
            except ConfigError as exc:
                why = f"cannot apply {live} live: {exc}"
                if restart:
                    why += f"\n  ({', '.join(restart)} changed too: only a restart applies that)"
                log.error(
                    "rejected the changed %s, the running configuration stays: %s", self.path, why
                )
                self._report(why)
                return
        self.current = self.current.model_copy(update=live)
        self._report(None)

    def _report(self, rejected: str | None) -> None:
        if self.stats is not None:
            self.stats.config_outcome(rejected)
