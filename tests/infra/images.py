"""The test bed's container images, built on this machine with mmdebstrap and buildah.

Owns: a Debian bookworm base with Debian's own python3 (``BASE_IMAGE``: a root file system made
by mmdebstrap, cached as a tarball keyed by suite, mirror and package list, committed by
buildah), the project's two images built from the project's own ``Dockerfile`` on that base
(``KAFLEET_IMAGE``, the default target, and ``SPARK_IMAGE``, ``--target spark``), a handler's
image on each (``examples/Dockerfile``: ``EXAMPLES_IMAGE``, ``EXAMPLES_SPARK_IMAGE``), and their
``docker-archive`` tarballs, which ``ctr images import`` loads without any registry. An image is
rebuilt only when its fingerprint changes: the Dockerfile, .dockerignore, pyproject.toml, the
sources under ``consumer/`` and ``operator/`` (README.md only reaches the wheel's metadata, so it
is left out), and the base image. Everything lives under ``.cache/images/``: the tarballs,
buildah's storage (``--root``/``--runroot``), runc's state, its temporary files and the build
logs. buildah keeps a blob-info cache in ``/var/lib/containers/cache`` whatever ``--root`` says;
a build removes it again if it was not there before. Builds run one at a time (a file lock).

Does not own: containerd, importing the tarballs or running pods (``tests/infra/node.py``), nor
what the images hold (the ``Dockerfile``).

    python -m tests.infra.images build   # build what changed; print "<image> <tarball>" lines
    python -m tests.infra.images sizes   # print each image's size in bytes
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafleet
from tests.infra.kafka import REPO_ROOT, TestbedError

CACHE = REPO_ROOT / ".cache" / "images"
STORAGE = CACHE / "buildah"
TMP = CACHE / "tmp"
LOGS = CACHE / "logs"

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-venv for the Dockerfile's build venv (ensurepip); no python3-pip: the images install
# with a pinned pip run from its wheel, in venvs. ca-certificates for pip and urllib over TLS.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    '--aptopt=APT::Install-Recommends "false"',
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

BASE_IMAGE = "localhost/bookworm-python:12"
KAFLEET_IMAGE = f"localhost/kafleet:{kafleet.__version__}"
SPARK_IMAGE = f"localhost/kafleet-spark:{kafleet.__version__}"
TARGETS: dict[str, str | None] = {KAFLEET_IMAGE: None, SPARK_IMAGE: "spark"}
# A handler's image as users build one (examples/Dockerfile: kafleet plus examples/orders.py),
# on each of the two: the end-to-end tests' workers run it.
EXAMPLES_DIR = REPO_ROOT / "examples"
EXAMPLES_IMAGE = f"localhost/kafleet-examples:{kafleet.__version__}"
EXAMPLES_SPARK_IMAGE = f"localhost/kafleet-examples-spark:{kafleet.__version__}"
EXAMPLES = {EXAMPLES_IMAGE: KAFLEET_IMAGE, EXAMPLES_SPARK_IMAGE: SPARK_IMAGE}
BASE_LABEL = "io.kafleet.testbed.base-rootfs"

# The TLS proxy's CA: pip, urllib and apt inside the build trust what the host trusts.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
FINGERPRINTED = ("Dockerfile", ".dockerignore", "pyproject.toml")
SOURCE_DIRS = ("consumer", "operator")
# Kept under .cache: runc's state of RUN steps (else /run/runc), and, through a containers.conf
# of our own (read instead of Debian's, which only restates buildah's defaults), the lock of a
# CNI network never used (else /etc/cni/net.d/cni.lock; --cni-config-dir does not reach RUN
# steps). buildah still makes short-lived files in /var/tmp; none stays.
RUNC_ROOT = ("--runtime-flag", f"root={STORAGE / 'runc'}")
CONTAINERS_CONF = STORAGE / "containers.conf"
# What buildah makes on the host whatever --root says: its blob-info cache (each chain's first
# missing folder is removed after a build).
HOST_LEFTOVERS = ((Path("/var/lib/containers"), Path("/var/lib/containers/cache")),)


def check_host() -> None:
    """Root, buildah, mmdebstrap and the CA bundle, or a TestbedError naming what is missing."""
    if os.geteuid() != 0:
        raise TestbedError(
            "the test bed's images need root: mmdebstrap builds the base in root mode and "
            "buildah uses overlay storage; run as root"
        )
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        raise TestbedError(
            f"{' and '.join(missing)} not found on PATH; the test bed builds its images "
            "without a registry: apt-get install buildah mmdebstrap"
        )
    if not CA_BUNDLE.is_file():
        raise TestbedError(f"{CA_BUNDLE} is missing; builds mount it for pip's TLS")


def buildah(*args: str, log: Path | None = None) -> str:
    """Run buildah on the test bed's own storage; return its stdout (or write it to ``log``)."""
    TMP.mkdir(parents=True, exist_ok=True)
    STORAGE.mkdir(parents=True, exist_ok=True)
    conf = f'[network]\nnetwork_config_dir = "{STORAGE / "cni"}"\n'
    if not CONTAINERS_CONF.is_file() or CONTAINERS_CONF.read_text() != conf:
        CONTAINERS_CONF.write_text(conf)
    cmd = ["buildah", "--root", str(STORAGE / "root"), "--runroot", str(STORAGE / "run")]
    cmd += ["--storage-driver", "overlay", *args]
    return _run(cmd, log, f"buildah {args[0]}")


def _run(cmd: list[str], log: Path | None, what: str) -> str:
    # libmount (mmdebstrap's mounts) would keep /run/mount/utab; buildah's temporary files too.
    env = {**os.environ, "TMPDIR": str(TMP), "LIBMOUNT_UTAB": str(TMP / "utab")}
    env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
    if log is None:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise TestbedError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-3000:]}")
        return done.stdout
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if code.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise TestbedError(f"{what} failed ({code.returncode}); the end of {log}:\n{tail}")
    return ""


def _say(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def _inspect(ref: str) -> dict[str, Any] | None:
    """``buildah inspect`` of an image in the test bed's storage, or None if it is not there."""
    try:
        found: dict[str, Any] = json.loads(buildah("inspect", "--type", "image", ref))
    except TestbedError:
        return None
    return found


def _base_key() -> str:
    text = "\n".join((SUITE, MIRROR, *BASE_PACKAGES, *MMDEBSTRAP_OPTIONS, BASE_PATH))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rootfs(key: str) -> Path:
    """The base's root file system as a tarball, made by mmdebstrap once per key."""
    tar = CACHE / f"bookworm-python-{key}.tar"
    if tar.is_file():
        return tar
    for stale in CACHE.glob("bookworm-python-*.tar"):
        stale.unlink()
    partial = CACHE / f"partial-{key}.tar"  # mmdebstrap picks the format from ".tar"
    partial.unlink(missing_ok=True)
    packages = ",".join(BASE_PACKAGES)
    cmd = ["mmdebstrap", f"--include={packages}", *MMDEBSTRAP_OPTIONS, SUITE, str(partial), MIRROR]
    started = time.monotonic()
    _run(cmd, LOGS / "mmdebstrap.log", "mmdebstrap")
    partial.rename(tar)
    _say(f"rootfs {tar.name}: {time.monotonic() - started:.0f} s, {tar.stat().st_size:,} bytes")
    return tar


def base_image() -> str:
    """Commit (or reuse) ``BASE_IMAGE``; return its image id."""
    key = _base_key()
    found = _inspect(BASE_IMAGE)
    if found is not None and (found["OCIv1"]["config"].get("Labels") or {}).get(BASE_LABEL) == key:
        return str(found["FromImageID"])
    tar = _rootfs(key)
    started = time.monotonic()
    container = buildah("from", "scratch").strip()
    try:
        buildah("add", container, str(tar), "/")
        config = ["--cmd", '["python3"]', "--env", "LANG=C.UTF-8", "--env", f"PATH={BASE_PATH}"]
        buildah("config", *config, "--label", f"{BASE_LABEL}={key}", container)
        buildah("commit", "--quiet", container, BASE_IMAGE)
    finally:
        buildah("rm", container)
    _say(f"{BASE_IMAGE}: committed in {time.monotonic() - started:.0f} s, {_size(BASE_IMAGE):,} B")
    buildah("rmi", "--prune")  # the layer cache of builds on the previous base, now useless
    return str((_inspect(BASE_IMAGE) or {})["FromImageID"])


def fingerprint(base_id: str) -> str:
    """What the project's images are built from: the base and the files the build reads."""
    digest = hashlib.sha256(f"{base_id}\n{kafleet.__version__}\n".encode())
    files = [REPO_ROOT / name for name in FINGERPRINTED]
    for folder in SOURCE_DIRS:
        files += sorted(p for p in (REPO_ROOT / folder).rglob("*") if p.is_file() and _kept(p))
    for path in files:
        digest.update(f"{path.relative_to(REPO_ROOT)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _kept(path: Path) -> bool:
    """Whether .dockerignore lets the file into the build context."""
    parts = path.relative_to(REPO_ROOT).parts
    skipped = any(p == "__pycache__" or p.endswith(".egg-info") or p[0] == "." for p in parts)
    return not skipped and path.suffix not in {".pyc", ".pyo", ".pyd"}


def _size(ref: str) -> int:
    """The image's size in bytes: its layers, uncompressed (what ``buildah images`` rounds)."""
    found = _inspect(ref)
    if found is None:
        raise TestbedError(f"{ref} is not in the test bed's buildah storage; run the build first")
    layers = json.loads(str(found["Manifest"]))["layers"]
    return sum(int(layer["size"]) for layer in layers)


def tarball(ref: str) -> Path:
    """Where ``build_all`` puts ``ref``'s docker-archive (it may not be built yet)."""
    return CACHE / (ref.removeprefix("localhost/").replace(":", "-") + ".tar")


def _build(
    ref: str,
    target: str | None,
    key: str,
    context: Path = REPO_ROOT,
    base: str = BASE_IMAGE,
) -> Path:
    tar = tarball(ref)
    stamp = tar.with_suffix(".fingerprint")
    if tar.is_file() and stamp.is_file() and stamp.read_text() == key:
        return tar
    started = time.monotonic()
    log = LOGS / f"{tar.stem}.log"
    _say(f"building {ref} (log: {log})")
    buildah(
        *("bud", "--pull=never", "--network", "host", "--layers", *RUNC_ROOT),
        *("-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"),
        *("--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"KAFLEET_IMAGE={base}"),
        *("--build-arg", f"VERSION={kafleet.__version__}"),
        *(("--target", target) if target else ()),
        *("-t", ref, "-f", str(context / "Dockerfile"), str(context)),
        log=log,
    )
    built = time.monotonic()
    partial = tar.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    buildah("push", "--quiet", ref, f"docker-archive:{partial}:{ref}")
    partial.rename(tar)
    stamp.write_text(key)
    _say(
        f"{ref}: built in {built - started:.0f} s, exported in {time.monotonic() - built:.0f} s; "
        f"image {_size(ref):,} B, tarball {tar.stat().st_size:,} B"
    )
    return tar


@contextlib.contextmanager
def _host_untouched() -> Iterator[None]:
    """One build at a time, and what buildah made on the host removed again."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [next((p for p in chain if not p.exists()), None) for chain in HOST_LEFTOVERS]
        try:
            yield
        finally:
            for path in missing:
                if path is not None:
                    shutil.rmtree(path, ignore_errors=True)


def build_all() -> dict[str, Path]:
    """Build (or reuse) the base and the project's images; return {image: docker-archive}."""
    check_host()
    with _host_untouched():
        key = fingerprint(base_image())
        built = {ref: _build(ref, target, key) for ref, target in TARGETS.items()}
        examples = hashlib.sha256(key.encode())
        for path in sorted(EXAMPLES_DIR.glob("*")):
            if path.is_file() and path.suffix not in {".pyc", ".pyo"}:
                examples.update(path.name.encode() + path.read_bytes())
        for ref, base in EXAMPLES.items():  # examples/Dockerfile on top of each image
            built[ref] = _build(ref, None, examples.hexdigest(), EXAMPLES_DIR, base)
        return built


def sizes() -> dict[str, int]:
    """Each image's size in bytes, from the test bed's buildah storage."""
    check_host()
    with _host_untouched():
        return {ref: _size(ref) for ref in (BASE_IMAGE, *TARGETS, *EXAMPLES)}


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["build"])[0]
    try:
        if command == "build":
            for ref, tar in build_all().items():
                print(ref, tar)
        elif command == "sizes":
            for ref, size in sizes().items():
                print(f"{ref} {size}")
        else:
            print(
                f"usage: python -m tests.infra.images build|sizes, not {command}", file=sys.stderr
            )
            return 2
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
