"""Keeping an example's output to its own story: everything the libraries under it write to
standard error (librdkafka's retries while a new broker loads its coordinators, the JVM's and
Spark's log4j start-up lines, kafleet's own log) goes to a log file instead, named at the end.

Owns: pointing this process's file descriptor 2 at a fresh log for a stretch (``logs_to``), so
that a JVM started meanwhile (Spark's, in-process) keeps writing there for the rest of its
life, and, when the example fails, showing the log's last lines on the terminal after what the
example printed (``show_tail``). Does not own what the examples print on standard output.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

TAIL_LINES = 40


@contextlib.contextmanager
def logs_to(path: Path) -> Iterator[Path]:
    """Standard error into ``path`` (this run's alone) while the block runs; the log's tail on
    the terminal if the block raises (not on Ctrl-C: the terminal shows that)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.dup(2)
    with path.open("wb") as log:
        os.dup2(log.fileno(), 2)
    failed = False
    try:
        yield path
    except Exception:
        failed = True
        raise
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        if failed:
            show_tail(path)


def show_tail(path: Path) -> None:
    """The last lines of the log ``path`` on standard error, after what was printed so far."""
    sys.stdout.flush()
    sys.stderr.flush()
    lines = path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
    print(f"the log's end ({path}):", *(f"  {line}" for line in lines), sep="\n", file=sys.stderr)
