"""kafleet installs on its own: its wheel, built from its sdist as ``make dist`` builds it,
holds both packages typed and nothing else, and once pip-installed into a fresh virtual
environment with no source tree beside it, runs what a user runs: ``kafleet --version``,
``kafleet worker --help``, a worker that handles and commits every record on the test broker,
``kafleet operator --help`` with the ``[operator]`` extra (and a message, not a traceback,
without it), ``import kafleet``, and mypy --strict reading its types (``py.typed``)."""

from __future__ import annotations

import email
import re
import signal
import subprocess
import tarfile
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

import kafleet
from tests.conftest import TopicFactory
from tests.infra.records import ProduceReport
from tests.infra.waiting import wait_until
from tests.packaging import installing

# Building, and pip installing two environments' dependencies, on a busy machine.
pytestmark = pytest.mark.timeout(900)

VERSION = kafleet.__version__
ROOTS = {"kafleet": "consumer", "kafleet_operator": "operator"}


def _package_files(source: Path) -> set[str]:
    """Every file of the two packages that git knows (modules, py.typed), as the wheel names
    them."""
    files = set()
    for package, root in ROOTS.items():
        for path in (source / root / package).rglob("*"):
            if path.is_file():
                files.add(path.relative_to(source / root).as_posix())
    return files


def test_the_wheel_holds_both_packages_typed_and_nothing_else(dists: installing.Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        meta = email.message_from_string(
            wheel.read(f"kafleet-{VERSION}.dist-info/METADATA").decode()
        )
    info = {name for name in names if name.startswith(f"kafleet-{VERSION}.dist-info/")}

    assert dists.wheel.name == f"kafleet-{VERSION}-py3-none-any.whl"
    assert names - info == _package_files(dists.source)  # no tests, bench, caches or byte code
    assert {"kafleet/py.typed", "kafleet_operator/py.typed"} <= names
    assert f"kafleet-{VERSION}.dist-info/licenses/LICENSE" in info
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    operator_needs = [r for r in meta.get_all("Requires-Dist", []) if 'extra == "operator"' in r]
    assert {re.split(r"[~=<>!; \[]", r, maxsplit=1)[0] for r in operator_needs} == {
        "kopf",
        "kubernetes",
    }


def test_the_sdist_holds_what_builds_the_wheel_and_no_tests(dists: installing.Dists) -> None:
    with tarfile.open(dists.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    roots = {name.split("/", 1)[0] for name in members}
    package_files = {f"{ROOTS[p.split('/')[0]]}/{p}" for p in _package_files(dists.source)}

    assert dists.sdist.name == f"kafleet-{VERSION}.tar.gz"
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} <= members
    assert package_files <= members
    assert roots <= {
        "consumer",
        "operator",
        "kafleet.egg-info",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "PKG-INFO",
        "setup.cfg",
    }


def test_kafleet_version_is_the_version_the_wheel_was_built_with(
    installed: installing.Venv,
) -> None:
    done = installed.run("kafleet", "--version")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"kafleet {VERSION} (confluent-kafka "), done.stdout


def test_import_kafleet_loads_every_public_name_from_the_installed_wheel(
    installed: installing.Venv,
) -> None:
    done = installed.run(
        "python",
        "-c",
        "import kafleet; [getattr(kafleet, n) for n in kafleet.__all__]; print(kafleet.__file__)",
    )

    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(installed.root), done.stdout


def test_kafleet_worker_help_lists_the_configuration_flags(installed: installing.Venv) -> None:
    done = installed.run("kafleet", "worker", "--help")

    assert done.returncode == 0, done.stderr
    assert all(flag in done.stdout for flag in ("--config", "--bootstrap-servers", "--handler"))


def test_kafleet_operator_without_the_extra_says_what_to_install(
    installed: installing.Venv,
) -> None:
    ran = installed.run("kafleet", "operator")
    flagged = installed.run("kafleet", "operator", "--namespace", "shop", "--shards", "2")
    helped = installed.run("kafleet", "operator", "--help")

    for done in (ran, flagged):  # its flags, unknown without the extra, are not the error
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        assert "needs kopf and kubernetes" in done.stderr
        assert "pip install 'kafleet[operator]'" in done.stderr
    assert helped.returncode == 0, helped.stderr
    assert "pip install 'kafleet[operator]'" in " ".join(helped.stdout.split())


def test_kafleet_operator_with_the_extra_lists_its_flags_and_its_modules_import(
    installed_with_operator: installing.Venv,
) -> None:
    helped = installed_with_operator.run("kafleet", "operator", "--help")
    imported = installed_with_operator.run(
        "python", "-c", "import kafleet_operator.handlers, kafleet_operator.main"
    )

    assert helped.returncode == 0, helped.stderr
    assert all(flag in helped.stdout for flag in ("--namespace", "--shards", "--kubeconfig"))
    assert "Not available here" not in helped.stdout
    assert imported.returncode == 0, imported.stderr


USER_CODE = '''\
"""A user's worker module: kafleet's public names as mypy --strict sees them installed."""

from __future__ import annotations

from pathlib import Path

import kafleet
import kafleet_operator
from kafleet import ConfigError, ConsumerConfig, KafleetError, ParallelConsumer, Record
from kafleet import load_config


def note(record: Record) -> None:
    print(record.topic, record.partition, record.offset, len(record.value or b""))


def start(path: Path) -> ParallelConsumer:
    config: ConsumerConfig = load_config(path, {"concurrency": 4})
    return ParallelConsumer(config, note)


mistakes: tuple[type[KafleetError], ...] = (ConfigError,)
versions: tuple[str, str] = (kafleet.__version__, kafleet_operator.__version__)
'''

USER_MISTAKES = '''\
"""A user's mistakes, which only kafleet's types let mypy find."""

from __future__ import annotations

import kafleet
from kafleet import Record

version: int = kafleet.__version__


def offset_of(record: Record) -> str:
    return record.offset
'''


def test_mypy_strict_reads_kafleets_types_from_the_installed_wheel(
    installed: installing.Venv, tmp_path: Path
) -> None:
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "mistakes.py").write_text(USER_MISTAKES)

    done = installed.mypy(tmp_path, "user.py", "mistakes.py")

    errors = re.findall(r"^(\S+?):\d+: error: .*\[([\w-]+)\]$", done.stdout, re.MULTILINE)
    assert sorted(errors) == [("mistakes.py", "assignment"), ("mistakes.py", "return-value")], (
        done.stdout + done.stderr
    )


HANDLER = '''\
"""A user's handler: notes each record's partition, offset and number in the file NOTED."""

import os
import threading

from kafleet import Record

_lock = threading.Lock()
_noted = open(os.environ["NOTED"], "a", buffering=1)


def note(record: Record) -> None:
    number = (record.value or b"").split(b":", 1)[0].decode()
    with _lock:
        _noted.write(f"{record.partition} {record.offset} {number}\\n")
'''


def test_the_installed_worker_handles_and_commits_every_record(
    installed: installing.Venv,
    kafka: str,
    topic_factory: TopicFactory,
    produce: Callable[..., ProduceReport],
    committed_offsets: Callable[[str, str, int], dict[int, int]],
    end_offsets: Callable[[str, int], dict[int, int]],
    tmp_path: Path,
) -> None:
    count, partitions = 300, 3
    topic = topic_factory(partitions=partitions)
    group = f"g-{topic}"
    produce(topic, count, keys=30)
    (tmp_path / "noted.py").write_text(HANDLER)
    (tmp_path / "worker.yaml").write_text(
        textwrap.dedent(f"""\
            bootstrap_servers: {kafka}
            group_id: {group}
            topics: [{topic}]
            handler: noted:note
            ordering: key
            concurrency: 8
            commit_interval_ms: 200
            shutdown_grace_s: 20
        """)
    )
    noted, log = tmp_path / "noted.txt", tmp_path / "worker.log"
    noted.touch()

    with open(log, "wb") as output:
        worker = installed.start(
            "kafleet",
            "worker",
            "--config",
            "worker.yaml",
            cwd=tmp_path,
            output=output,
            env={"NOTED": str(noted)},
        )
        try:
            wait_until(
                lambda: _running(worker, log) and len(noted.read_text().splitlines()) >= count,
                120,
                f"the installed worker to handle {count} records",
            )
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    lines = [line.split() for line in noted.read_text().splitlines()]
    assert code == 0, log.read_text()[-3000:]
    assert f"stopped cleanly: {count} records processed" in log.read_text()
    assert sorted(int(number) for _, _, number in lines) == list(range(count))
    assert committed_offsets(group, topic, partitions) == end_offsets(topic, partitions)


def _running(worker: subprocess.Popen[bytes], log: Path) -> bool:
    """True while the worker runs; a worker that ended fails the test with its log."""
    if worker.poll() is not None:
        pytest.fail(
            f"the installed worker ended (exit {worker.returncode}) before handling every "
            f"record:\n{log.read_text()[-3000:]}",
            pytrace=False,
        )
    return True
