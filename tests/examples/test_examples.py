"""Every example that users copy runs, against the session's real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_roundtrip_example_prints_every_record_it_produced(kafka: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "roundtrip.py"),
            "--bootstrap-servers",
            kafka,
            "--topic",
            "examples-roundtrip",
            "--count",
            "7",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "produced 7 records to examples-roundtrip (3 partitions)"
    assert sum('"order":' in line for line in lines) == 7
    assert lines[-1] == "consumed 7 of 7 records back"
