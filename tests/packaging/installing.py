"""kafleet as a user gets it: the sdist and the wheel that ``python -m build`` makes (as ``make
dist`` does: the wheel built from the sdist), and the wheel pip-installed into a fresh virtual
environment whose commands run from a folder of their own with no ``PYTHONPATH``, so nothing of
the source tree can stand in for what the wheel ships.

Owns: building from a copy of the files git knows (``--cached --others --exclude-standard``:
what a commit of the tree would hold; the build writes its egg-info there, not into the
repository), the virtual environments (made without pip; the project's pip installs into them
with ``--python``, dependencies from the index through pip's cache), and running commands in
them. Does not own a broker, topics or what the tests check (``tests/conftest.py``,
``test_wheel_install.py``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import REPO

# What would let a child process import the source tree, or find stubs that are not the wheel's.
_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "MYPYPATH", "VIRTUAL_ENV")


def clean_env() -> dict[str, str]:
    """This process's environment without ``PYTHONPATH`` and the like."""
    return {key: value for key, value in os.environ.items() if key not in _LEAKS}


def _step(
    cmd: Sequence[str | Path], what: str, cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run one step of the set-up; a step that fails fails the test, saying which and why."""
    args = [str(part) for part in cmd]
    try:
        done = subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} took longer than {timeout_s:g} s: {' '.join(args)}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {done.returncode}): {' '.join(args)}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
            pytrace=False,
        )
    return done


@dataclass(frozen=True)
class Dists:
    """What ``python -m build`` made, and the copy of the tree it was made from."""

    source: Path
    sdist: Path
    wheel: Path


def build(workdir: Path) -> Dists:
    """Copy the files git knows into ``workdir/source`` and build the sdist, then the wheel from
    the sdist, into ``workdir/dist``."""
    if importlib.util.find_spec("build") is None:
        pytest.fail(
            "python -m build is not installed in this environment: `make venv` installs it "
            "(kafleet's dev extra)",
            pytrace=False,
        )
    listed = _step(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        "listing the files git knows",
        REPO,
        dict(os.environ),
        60,
    )
    source = workdir / "source"
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():  # a file deleted but not yet committed is still listed
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = workdir / "dist"
    # The project's environment, which has build: the backend itself runs in an isolated one.
    _step(
        [sys.executable, "-m", "build", "--outdir", out, source],
        "python -m build",
        workdir,
        dict(os.environ),
        600,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dists(source, sdist, wheel)


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment with kafleet's wheel installed, and an empty folder, its
    ``home``, that its commands run in unless told otherwise."""

    root: Path
    home: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def env(self) -> dict[str, str]:
        path = f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**clean_env(), "PATH": path, "VIRTUAL_ENV": str(self.root)}

    def run(
        self, command: str, *args: str, cwd: Path | None = None, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``command`` from the environment's ``bin`` (``kafleet``, ``python``) with ``args``,
        whatever its exit status."""
        return subprocess.run(
            [str(self.root / "bin" / command), *args],
            cwd=cwd or self.home,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def start(
        self, command: str, *args: str, cwd: Path, output: IO[bytes], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        """``command`` started in ``cwd`` with ``env`` added, its stdout and stderr into
        ``output``."""
        return subprocess.Popen(
            [str(self.root / "bin" / command), *args],
            cwd=cwd,
            env={**self.env(), **env},
            stdout=output,
            stderr=subprocess.STDOUT,
        )

    def mypy(self, cwd: Path, *files: str) -> subprocess.CompletedProcess[str]:
        """The project's mypy --strict on ``files`` in ``cwd``, finding imports in this
        environment's site-packages alone (``--python-executable``), with no config file."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--config-file=",
                "--no-color-output",
                "--python-executable",
                str(self.python),
                "--cache-dir",
                str(cwd / ".mypy_cache"),
                *files,
            ],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )


def install(wheel: Path, root: Path, extras: str = "") -> Venv:
    """A fresh virtual environment at ``root`` with ``wheel`` and its dependencies (and those of
    ``extras``, such as ``operator``) installed by pip."""
    home = root.with_name(f"{root.name}-home")
    home.mkdir()
    _step(
        [sys.executable, "-m", "venv", "--without-pip", root],
        "python -m venv",
        home,
        clean_env(),
        120,
    )
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    _step(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            root / "bin" / "python",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            requirement,
        ],
        f"pip install {wheel.name}{f'[{extras}]' if extras else ''}",
        home,
        clean_env(),
        900,
    )
    return Venv(root, home)
