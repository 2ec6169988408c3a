"""The documentation site, built strictly as `make docs` builds it, read page by page in a real
headless Chromium: every page loads without an error in its console, loads all it asks for and
nothing from outside the site, draws every diagram, and every link inside the site reaches a
page and an anchor that exist. The home page and a guide are kept as screenshots
(``.cache/test-artifacts/docs/``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs import site
from tests.infra import browser

ARTIFACTS = site.REPO / ".cache" / "test-artifacts" / "docs"
MIN_SCALE = 0.5  # of a diagram's drawn size: below it its labels are too small to read
SCREENSHOTS = {"": "home.png", "getting-started/laptop/": "guide-laptop.png"}


@dataclass(frozen=True)
class Read:
    """The built site: its folder, the base URL it was served at, and every page as the
    browser read it, by URL."""

    folder: Path
    base: str
    pages: dict[str, site.Page]


@pytest.fixture(scope="module")
def read(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Read]:
    folder = tmp_path_factory.mktemp("site")
    site.build(folder)
    with site.serve(folder) as base, browser.launch() as chromium:
        urls = site.pages(folder, base)
        shots = {base + path: ARTIFACTS / name for path, name in SCREENSHOTS.items()}
        missing = set(shots) - set(urls)
        assert not missing, f"no such pages to screenshot: {sorted(missing)}"
        yield Read(folder, base, {url: site.read(chromium, url, shots.get(url)) for url in urls})


def test_the_site_has_every_section_a_reader_looks_for(read: Read) -> None:
    paths = {url.removeprefix(read.base) for url in read.pages}
    for section in ("getting-started/", "concepts/", "how-to/", "reference/", "benchmarks/"):
        assert any(path.startswith(section) for path in paths), section
    assert len(read.pages) >= 40


def test_every_page_loads_without_an_error_in_its_console(read: Read) -> None:
    errors = {url: p.console_errors + p.script_errors for url, p in read.pages.items()}
    assert {url: e for url, e in errors.items() if e} == {}


def test_every_page_loads_all_it_asks_for_and_nothing_from_outside_the_site(
    read: Read,
) -> None:
    pages = read.pages
    assert {url: p.failed for url, p in pages.items() if p.failed} == {}
    assert {url: p.outside for url, p in pages.items() if p.outside} == {}
    unloaded = {url: [s for s, ok in p.images.items() if not ok] for url, p in pages.items()}
    assert {url: srcs for url, srcs in unloaded.items() if srcs} == {}
    assert {url: p.title for url, p in pages.items() if not p.title.endswith("kafleet")} == {}


def test_every_diagram_is_drawn_as_a_picture_not_left_as_its_source(
    read: Read,
) -> None:
    pages = read.pages
    assert {url: p.diagram_wait for url, p in pages.items() if p.diagram_wait} == {}
    drawn = [(url, d) for url, p in pages.items() for d in p.diagrams]
    assert len(drawn) >= 4  # the data flow and the fleet, on their pages and the home page
    assert {url: p.undrawn for url, p in pages.items() if p.undrawn} == {}
    for url, diagram in drawn:
        assert diagram.role != "error", f"{url}: Mermaid could not parse a diagram"
        assert diagram.width > 100, f"{url}: {diagram}"
        assert diagram.height > 50, f"{url}: {diagram}"
        assert diagram.labels >= 3, f"{url}: {diagram}"
        # Shrunk to fit the page, a wide diagram's labels are too small to read.
        assert diagram.scale >= MIN_SCALE, f"{url}: a diagram shown at {diagram.scale:.0%}"


def test_every_link_inside_the_site_reaches_a_page_and_an_anchor_that_exist(
    read: Read,
) -> None:
    broken = []
    for url, page in read.pages.items():
        for link in page.links:
            if not link.startswith(read.base):
                continue
            target, fragment = site.split(link)
            if target in read.pages:
                if fragment and fragment not in read.pages[target].ids:
                    broken.append(f"{url} -> {link}: no such anchor")
            elif not site.file_of(read.folder, read.base, target).is_file():
                broken.append(f"{url} -> {link}: no such page or file")
    assert broken == []


def test_the_home_page_and_a_guide_are_kept_as_screenshots(read: Read) -> None:
    for name in SCREENSHOTS.values():
        shot = ARTIFACTS / name
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 20_000, f"{shot}: too small to show a page"
    print(f"screenshots: {ARTIFACTS}")
