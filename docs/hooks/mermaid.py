"""Mermaid.js served from the site itself, not from a CDN.

Material for MkDocs renders ```` ```mermaid ```` fences with Mermaid.js, which it loads from
unpkg unless a global ``mermaid`` is already defined; this hook adds a ``<script>`` of the
site's own ``javascripts/mermaid.min.js`` to each page that has a diagram (and to no other:
the file is 3 MB of JavaScript, and parsing it took 40 % of loading a page without one), so the
page defines it and the diagrams render offline and on machines that reach no CDN.

Owns: fetching the ``mermaid`` npm package at a pinned version with ``npm pack`` (one tarball,
none of its dependencies: ``dist/mermaid.min.js`` is self-contained), checking the tarball
against a pinned integrity hash, and keeping its ``dist/mermaid.min.js`` and ``LICENSE`` in
``.cache/mermaid/<version>/`` (``python docs/hooks/mermaid.py fetch``, what ``make docs-mermaid``
runs); and, as an MkDocs hook, adding the script to the pages with a diagram and copying the
files into the built site. Does not fetch anything during
a build: a missing file stops the build, naming the command that fetches it. Needs npm.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

# The last 11.x release: Material for MkDocs 9.x is written against Mermaid 11's API.
VERSION = "11.17.2"
# The registry's dist.integrity of mermaid-<VERSION>.tgz (npm view mermaid@<VERSION>
# dist.integrity): a tarball that differs is refused.
INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47l"
    "AbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg=="
)
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "mermaid" / VERSION
# Where the file lands in the site: extra_javascript in mkdocs.yml names the same path.
SITE_PATH = "javascripts/mermaid.min.js"
FILES = {"package/dist/mermaid.min.js": "mermaid.min.js", "package/LICENSE": "LICENSE"}


def _integrity(path: Path) -> str:
    digest = hashlib.sha512(path.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode()


def fetch() -> Path:
    """The cached ``mermaid.min.js``, fetched and checked once per version."""
    script = CACHE / "mermaid.min.js"
    if script.is_file():
        return script
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("error: fetching Mermaid.js for the docs needs npm, which is not on PATH")
    print(f"fetching mermaid {VERSION} with npm pack", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [npm, "pack", f"mermaid@{VERSION}", "--json", "--pack-destination", tmp],
            capture_output=True, text=True, check=False, cwd=tmp,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"error: npm pack mermaid@{VERSION} failed:\n{done.stderr}")
        (packed,) = json.loads(done.stdout)
        tarball = Path(tmp) / packed["filename"]
        found = _integrity(tarball)
        if found != INTEGRITY:
            raise SystemExit(f"error: mermaid-{VERSION}.tgz has integrity {found}, not the "
                             f"pinned {INTEGRITY}")  # fmt: skip
        partial = CACHE.with_name(CACHE.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tarfile.open(tarball) as archive:
            for member, name in FILES.items():
                source = archive.extractfile(member)
                if source is None:
                    raise SystemExit(f"error: mermaid-{VERSION}.tgz has no {member}")
                (partial / name).write_bytes(source.read())
        shutil.rmtree(CACHE, ignore_errors=True)
        partial.rename(CACHE)
    return script


def on_post_page(output: str, page: Any, config: Any) -> str:
    """MkDocs hook: a page with a diagram loads the site's Mermaid.js (after Material's bundle,
    which looks for a global ``mermaid`` when it draws)."""
    if 'class="mermaid"' not in output:
        return output
    from mkdocs.utils import get_relative_url

    src = get_relative_url(SITE_PATH, page.url)
    return output.replace("</body>", f'<script src="{src}"></script>\n</body>', 1)


def on_post_build(config: Any, **_: Any) -> None:
    """MkDocs hook: put the cached Mermaid.js (and its licence) where the pages load it."""
    from mkdocs.exceptions import PluginError

    script = CACHE / "mermaid.min.js"
    if not script.is_file():
        raise PluginError(
            f"{script.relative_to(REPO)} is missing: run `make docs-mermaid` (or "
            "`python docs/hooks/mermaid.py fetch`) before building the docs"
        )
    target = Path(config["site_dir"]) / SITE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(script, target)
    shutil.copyfile(CACHE / "LICENSE", target.with_name("mermaid.LICENSE.txt"))


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        raise SystemExit("usage: python docs/hooks/mermaid.py fetch")
    print(fetch())
