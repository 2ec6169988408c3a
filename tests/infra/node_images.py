"""Images for the real node, which no registry serves: the pause image, and importing tarballs.

Owns: building the sandbox ("pause") image ``localhost/pause:3.10`` from ``tests/infra/pause``
(a static Go program; ``go build``, then ``buildah`` from scratch) into a docker-archive tarball
under ``.cache/node/images``, rebuilt only when the program changes; and ``load_images``, which
imports docker-archive tarballs into a running node's containerd (``ctr images import``),
skipping a tarball already imported unchanged.

Does not own: the project's images or their base, nor buildah's storage and what buildah leaves
on the host (``images.py``, whose ``buildah`` this module uses), nor the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.infra import images
from tests.infra.kafka import REPO_ROOT, TestbedError
from tests.infra.node_runtime import PAUSE_IMAGE

CACHE = REPO_ROOT / ".cache" / "node"
IMAGES = CACHE / "images"
PAUSE_SOURCE = Path(__file__).with_name("pause")
PAUSE_TARBALL = IMAGES / "pause-3.10.tar"


def _run(cmd: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        list(cmd), capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=600
    )
    if done.returncode != 0:
        raise TestbedError(
            f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout.strip()


def _pause_fingerprint() -> str:
    digest = hashlib.sha256(PAUSE_IMAGE.encode())
    for name in ("go.mod", "main.go"):
        digest.update((PAUSE_SOURCE / name).read_bytes())
    return digest.hexdigest()


def pause_image() -> Path:
    """The pause image's docker-archive tarball, built first if missing or stale."""
    marker = PAUSE_TARBALL.with_suffix(".fingerprint")
    if PAUSE_TARBALL.exists() and marker.exists() and marker.read_text() == _pause_fingerprint():
        return PAUSE_TARBALL
    if shutil.which("go") is None:
        raise TestbedError("'go' was not found on PATH; the pause image is a small Go program")
    IMAGES.mkdir(parents=True, exist_ok=True)
    binary = IMAGES / "pause"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false", "CGO_ENABLED": "0"}
    _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "."],
         env=env, cwd=PAUSE_SOURCE)  # fmt: skip
    if shutil.which("buildah") is None:
        raise TestbedError("'buildah' was not found on PATH (make node-tools installs it)")
    with images._host_untouched():  # one buildah at a time; nothing left on the host
        # --cni-config-dir: else buildah makes /etc/cni/net.d for a network it never uses.
        cni = f"--cni-config-dir={images.STORAGE / 'cni'}"
        container = images.buildah("from", cni, "scratch").strip()
        try:
            images.buildah("copy", container, str(binary), "/pause")
            images.buildah("config", "--entrypoint", '["/pause"]', "--cmd", "[]", container)
            images.buildah("commit", "--quiet", container, PAUSE_IMAGE)
        finally:
            images.buildah("rm", container)
        partial = PAUSE_TARBALL.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        images.buildah("push", "--quiet", PAUSE_IMAGE, f"docker-archive:{partial}:{PAUSE_IMAGE}")
        partial.rename(PAUSE_TARBALL)
    marker.write_text(_pause_fingerprint())
    return PAUSE_TARBALL


def _fingerprint(tarball: Path) -> str:
    stat = tarball.stat()
    return f"{tarball.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def image_refs(socket: Path) -> set[str]:
    """The images in the node's containerd (namespace ``k8s.io``, the CRI's)."""
    out = _run(["ctr", f"--address={socket}", "--namespace=k8s.io", "images", "ls", "--quiet"])
    return set(out.split())


def load_images(
    socket: Path, tarballs: Mapping[str, Path], record: Path, unpack: bool = True
) -> list[str]:
    """Import each ``{image ref: docker-archive tarball}`` into the containerd at ``socket``,
    unless that file, unchanged, was imported already (noted in ``record``); return the refs
    imported now. ``unpack=False`` leaves unpacking to the first container of the image (the
    CRI does it then): the import takes about 60 % of the time (5.3 s instead of 8.6 s for a
    360 MB image), and that image's first container starts about 4 s later."""
    done: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
    present = image_refs(socket)
    imported = []
    for ref, tarball in tarballs.items():
        if not tarball.exists():
            raise TestbedError(f"the tarball of image {ref} is not there: {tarball}")
        fingerprint = _fingerprint(tarball)
        if done.get(ref) == fingerprint and ref in present:
            continue
        ctr = ["ctr", f"--address={socket}", "--namespace=k8s.io", "images", "import"]
        _run([*ctr, *([] if unpack else ["--no-unpack"]), str(tarball)])
        if ref not in image_refs(socket):
            raise TestbedError(f"ctr imported {tarball}, yet containerd has no image {ref}")
        done[ref] = fingerprint
        record.write_text(json.dumps(done, indent=2))
        imported.append(ref)
    return imported
