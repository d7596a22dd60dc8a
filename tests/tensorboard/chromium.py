"""The tab in headless Chromium on a real ``tensorboard --logdir``, for the
views' browser tests. In CI (``CI=true``) a missing Chromium or Playwright
fails, as for `test_browser`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.tensorboard.screenshots import address
from tests.tensorboard.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    _playwright,
    _start_tensorboard,
)


@contextmanager
def tab_page(logdir: Path, tmp_path: Path, keys: dict[str, str]) -> Iterator[tuple]:
    """TensorBoard serving ``logdir`` and the tab opened at ``keys`` (its
    address's ``dc.*`` keys): yields (page, the tab's frame, the page's
    errors so far). Waits get room for a loaded 2-core host."""
    sync_playwright = _playwright()
    proc, url = _start_tensorboard(logdir, tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            page.set_default_timeout(90_000)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(address(url, keys))
            yield page, page.frame_locator("iframe"), errors
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
