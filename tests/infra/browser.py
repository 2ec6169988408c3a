"""A real headless browser for the documentation site's tests: Debian's Chromium, driven by
Playwright (Apache-2.0, from PyPI) over the DevTools protocol.

Owns: installing Chromium from Debian's packages when it is missing (``install``: ``python -m
tests.infra.browser install``, what ``make testbed`` runs) and launching it headless with the
flags this closed network needs (``launch``). Playwright never downloads a browser of its own
(``playwright install`` reaches a CDN this machine cannot): it starts Debian's binary. Does not
own what the tests do with the pages (``tests/docs/site.py``).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

from tests.infra import apt
from tests.infra.kafka import TestbedError

PACKAGE = "chromium"
CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# Headless, and quiet on a network that refuses everything outside: without the background
# flags Chromium opens connections to Google's hosts at every start, each refused.
FLAGS = (
    "--no-sandbox",  # the tests run as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def executable() -> Path | None:
    """Debian's Chromium, if it is installed."""
    found = next((Path(c) for c in CANDIDATES if Path(c).is_file()), None)
    if found is None and (which := shutil.which("chromium")) is not None:
        found = Path(which)
    return found


def install(log: bool = True) -> Path:
    """Chromium's binary, installed from Debian's packages first if it is missing."""
    found = executable()
    if found is not None:
        return found
    if log:
        print("installing Chromium from Debian's packages (for the docs' browser test)",
              file=sys.stderr)  # fmt: skip
    apt.install([PACKAGE], "the documentation site's browser test")
    found = executable()
    if found is None:
        raise TestbedError(f"Debian's {PACKAGE} was installed but none of {CANDIDATES} is there")
    return found


@contextlib.contextmanager
def launch() -> Iterator[Browser]:
    """A headless Chromium, closed on exit (Playwright gives it a fresh, empty profile)."""
    binary = executable()
    if binary is None:
        raise TestbedError(
            "the documentation site's browser test needs Chromium: run `make testbed` (or "
            f"`python -m tests.infra.browser install`, or apt-get install {PACKAGE})"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(binary), headless=True, args=list(FLAGS)
        )
        try:
            yield browser
        finally:
            browser.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m tests.infra.browser install")
    try:
        print(install())
    except TestbedError as error:
        raise SystemExit(f"error: {error}") from None
