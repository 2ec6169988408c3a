"""The documentation site as a reader meets it: built as `make docs` builds it, served over
HTTP, and every page opened in a real headless Chromium.

Owns: building the site strictly into a folder (``build``), serving a folder on loopback
(``serve``), and reading each page in the browser into a ``Page`` (what it logged as errors,
what it failed to load or loaded from outside, its diagrams as drawn, its images, its links and
its anchors), with a screenshot when asked. Does not judge any of it: the tests do
(``tests/docs/test_site_in_a_browser.py``).

Material for MkDocs draws each Mermaid diagram into a closed shadow root; an init script opens
every shadow root before the page's scripts run, so the drawn SVG can be read.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

from playwright.sync_api import Browser, ConsoleMessage, Request, Response
from playwright.sync_api import Error as PlaywrightError

REPO = Path(__file__).resolve().parents[2]
# What `make docs` sets (DOCS_ENV): MkDocs' notices about its future are not this site's.
ENV = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
DIAGRAM_WAIT_MS = 15_000
SETTLE_MS = 300

_OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attach.call(this, { ...init, mode: "open" });
};
"""
# Every diagram is drawn when each .mermaid element holds an SVG (or Mermaid's error SVG).
_DIAGRAMS_DRAWN = """
() => Array.from(document.querySelectorAll("div.mermaid"))
  .every(d => d.shadowRoot && d.shadowRoot.querySelector("svg"))
  && document.querySelectorAll("pre.mermaid").length === 0
"""
_READ = """
() => ({
  diagrams: Array.from(document.querySelectorAll("div.mermaid")).map(d => {
    const svg = d.shadowRoot && d.shadowRoot.querySelector("svg");
    const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
    const drawn = svg && svg.viewBox.baseVal ? svg.viewBox.baseVal.width : 0;
    return {
      role: svg ? svg.getAttribute("aria-roledescription") || "" : "",
      width: box.width, height: box.height,
      scale: drawn ? box.width / drawn : 0,
      labels: svg ? svg.querySelectorAll(".nodeLabel, .edgeLabel, text").length : 0,
    };
  }),
  undrawn: document.querySelectorAll("pre.mermaid, code.language-mermaid").length,
  images: Array.from(document.images).map(i => ({
    src: i.currentSrc || i.src, loaded: i.complete && i.naturalWidth > 0,
  })),
  links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
  ids: Array.from(document.querySelectorAll("[id], a[name]")).map(e => e.id || e.name),
  title: document.title,
})
"""


@dataclass(frozen=True)
class Diagram:
    """A drawn Mermaid diagram: its SVG's role ("error" for Mermaid's syntax error picture),
    size on the page in CSS pixels, the scale it is shown at (its width on the page over the
    width Mermaid drew it: a diagram too wide for the page is shrunk, and its labels with it),
    and how many labels it drew."""

    role: str
    width: float
    height: float
    scale: float
    labels: int


@dataclass
class Page:
    """One page as the browser read it."""

    url: str
    title: str = ""
    console_errors: list[str] = field(default_factory=list)
    script_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # requests that failed or answered >= 400
    outside: list[str] = field(default_factory=list)  # requests to anywhere but the site
    diagrams: list[Diagram] = field(default_factory=list)
    undrawn: int = 0  # Mermaid sources still shown as text
    diagram_wait: str = ""  # why the wait for the diagrams ended without them, if it did
    images: dict[str, bool] = field(default_factory=dict)  # src: loaded
    links: list[str] = field(default_factory=list)  # absolute
    ids: set[str] = field(default_factory=set)


def build(site: Path) -> None:
    """``mkdocs build --strict`` of mkdocs.yml into ``site``: AssertionError with MkDocs' words
    if it fails (a warning fails it)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, env={**os.environ, **ENV}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(
            f"mkdocs build --strict failed ({done.returncode}); `make docs` shows it:\n"
            f"{(done.stdout + done.stderr)[-4000:]}"
        )


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A tab closed while a file was still being sent is not the site's error: silent."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """``folder`` served on a free loopback port: its base URL, ending in "/"."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def pages(site: Path, base: str) -> list[str]:
    """The URL of every page of the built ``site``, as a reader's links name them (a folder's
    ``index.html`` by its folder)."""
    urls = []
    for path in sorted(site.rglob("*.html")):
        relative = path.relative_to(site).as_posix()
        urls.append(base + relative.removesuffix("index.html"))
    return urls


def read(browser: Browser, url: str, screenshot: Path | None = None) -> Page:
    """``url`` opened in a new tab of ``browser``, its scripts run and its diagrams drawn."""
    page = Page(url)
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(_OPEN_SHADOW_ROOTS)
    tab = context.new_page()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            page.console_errors.append(f"{message.text} ({message.location.get('url', '')})")

    def request(sent: Request) -> None:
        if not sent.url.startswith((origin, "data:", "blob:", "about:")):
            page.outside.append(sent.url)

    def response(got: Response) -> None:
        if got.status >= 400:
            page.failed.append(f"{got.url}: HTTP {got.status}")

    tab.on("console", console)
    tab.on("pageerror", lambda error: page.script_errors.append(str(error)))
    tab.on("request", request)
    tab.on("requestfailed", lambda r: page.failed.append(f"{r.url}: {r.failure}"))
    tab.on("response", response)
    try:
        # The network idle (the search index, Mermaid), then a moment more: an error a script
        # logs or throws just after the page loaded is still the page's.
        tab.goto(url, wait_until="networkidle")
        try:
            tab.wait_for_function(_DIAGRAMS_DRAWN, timeout=DIAGRAM_WAIT_MS)
        except PlaywrightError as error:
            page.diagram_wait = f"diagrams not drawn within {DIAGRAM_WAIT_MS} ms: {error}"
        tab.wait_for_timeout(SETTLE_MS)
        found = tab.evaluate(_READ)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(screenshot), full_page=True)
    finally:
        context.close()
    page.title = found["title"]
    page.diagrams = [Diagram(**d) for d in found["diagrams"]]
    page.undrawn = found["undrawn"]
    page.images = {i["src"]: i["loaded"] for i in found["images"]}
    page.links = found["links"]
    page.ids = set(found["ids"])
    return page


def split(link: str) -> tuple[str, str]:
    """A link's page (a folder's ``index.html`` named by its folder) and its fragment."""
    target, fragment = urldefrag(link)
    return target.removesuffix("index.html"), fragment


def file_of(site: Path, base: str, url: str) -> Path:
    """The file of ``site`` that ``url`` (under ``base``) is served from."""
    relative = url.removeprefix(base).split("?")[0]
    return site / (relative + "index.html" if relative.endswith("/") or not relative else relative)
