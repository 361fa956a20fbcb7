"""Every page of the built site in a real browser (headless Chromium and chromedriver, Debian's
packages, driven by selenium) at 1280 px: none overflows sideways, so no table or code block is
cut off or pushes the page wider. One browser looks at every page in turn, served over local
HTTP as a reader's browser would get them, all but the search index: the theme's search worker
fetches it on every page and builds its whole index there (three fifths of the browser's CPU
over the hundred pages, as much again as loading and laying them out), and the index lays out
nothing - the search results are drawn only once a reader types."""

from __future__ import annotations

import functools
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bridge_core.testing.services import service_unavailable

WIDTH = 1280
# The widest leaf elements of an overflowing page, to name what pushes it out.
_MEASURE = """
const root = document.documentElement;
const wide = [];
if (root.scrollWidth > root.clientWidth + 1) {
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.right > root.clientWidth + 1 && el.children.length === 0) {
      wide.push(el.tagName.toLowerCase() + " to " + Math.round(box.right) + "px: "
                + (el.textContent || "").trim().slice(0, 60));
      if (wide.length >= 3) break;
    }
  }
}
// A diagram (svgbob's SVG) wider than its column would be cut off there, not overflow the page.
const cut = [];
for (const svg of document.querySelectorAll("svg.diagram")) {
  const box = svg.getBoundingClientRect(), column = svg.parentElement.getBoundingClientRect();
  if (box.right > column.right + 1 || box.width < 10) cut.push(Math.round(box.width));
}
return {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, wide: wide,
        diagrams: document.querySelectorAll("svg.diagram").length, cut: cut};
"""


SEARCH_INDEX = "/search/search_index.json"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?")[0] == SEARCH_INDEX:
            self.send_error(404, "the search index is not served to the overflow test")
            return
        super().do_GET()


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    # What is withheld must be there to withhold: a renamed index would load again unnoticed.
    assert (site / SEARCH_INDEX.lstrip("/")).is_file(), "the theme moved its search index"
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        service_unavailable("Chromium and chromedriver (Debian: chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={WIDTH},900")
    options.binary_location = str(chromium)
    driver = webdriver.Chrome(service=Service(str(driver_path)), options=options)
    try:
        driver.set_window_size(WIDTH, 900)
        yield driver
    finally:
        driver.quit()


def test_no_page_overflows_at_1280_px(site: Path, served: str, browser: Any) -> None:
    # A control page that does overflow, so the measurement is proven able to see it.
    control = site / "overflow-control"
    control.mkdir(exist_ok=True)
    (control / "index.html").write_text(
        '<!doctype html><html><body><div style="width: 3000px">wide</div></body></html>',
        encoding="utf-8",
    )
    pages = sorted(
        re.sub("//+", "/", "/" + str(path.relative_to(site).parent).strip(".") + "/")
        for path in site.rglob("index.html")
    )
    assert len(pages) >= 20, pages
    measured: dict[str, dict[str, Any]] = {}
    for page in pages:
        browser.get(served + page)
        measured[page] = browser.execute_script(_MEASURE)
    assert browser.execute_script("return window.innerWidth") == WIDTH
    overflowing = {
        page: entry for page, entry in measured.items()
        if entry["scrollWidth"] > entry["clientWidth"] + 1
    }  # fmt: skip
    assert overflowing.pop("/overflow-control/")["scrollWidth"] >= 3000, (
        "the control did not overflow"
    )
    assert overflowing == {}, overflowing
    # The diagrams are drawn (svgbob, at build time) and each fits its column.
    assert sum(entry["diagrams"] for entry in measured.values()) >= 6
    assert {page: entry["cut"] for page, entry in measured.items() if entry["cut"]} == {}
