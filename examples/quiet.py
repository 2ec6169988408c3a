"""Keeping an example's output to its own story: everything the libraries under it write to
standard error (librdkafka's retries while a new broker loads its coordinators, the JVM's and
Spark's log4j start-up lines, kafleet's own log) goes to a log file instead, named at the end.

Owns: pointing this process's file descriptor 2 at the log for a stretch (``logs_to``), so that
a JVM started meanwhile (Spark's, in-process) keeps writing there for the rest of its life,
and, when the example fails, showing the log's last lines on the terminal. Does not own what
the examples print on standard output.
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
    """Standard error into ``path`` (appended) while the block runs; its tail on the terminal
    if the block raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield path
    except BaseException:
        show_tail(path, terminal)
        raise
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)


def show_tail(path: Path, fd: int = 2) -> None:
    """The last lines of the log ``path`` written to ``fd``, for a run that went wrong."""
    lines = path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
    os.write(fd, "".join(f"  {line}\n" for line in [f"the log's end ({path}):", *lines]).encode())
