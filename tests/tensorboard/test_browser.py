"""A real ``tensorboard --logdir`` and a real headless Chromium on the tab.

In CI (``CI=true``) a missing Chromium or Playwright fails this test: the
browser check is the only one that runs the ES modules.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from dc_core.store.logdir import write_profile

from tests.tensorboard.conftest import EVIL, make_profile

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


def _need(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI for the browser test (.ci/run installs it)", pytrace=False)
    pytest.skip(f"{what} not available")


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright (pip install playwright)")
    if not Path(CHROMIUM).exists():
        _need(f"Debian chromium at {CHROMIUM} (apt-get install chromium)")
    return sync_playwright


def _write_profiles(logdir: Path, src: Path) -> str:
    """Real PyTorch profiles when torch is here (two runs, for the diff), plus
    a run whose names are hostile HTML; returns a word to search for."""
    try:
        import torch  # noqa: F401

        import dc_torch.demo  # noqa: F401
    except ImportError:
        for run, scale in (("run-a", 1), ("run-b", 2)):
            write_profile(make_profile(src, 0, (5, 8), scale), logdir, run)
        word = "aten::mm"
    else:
        # In a fresh interpreter, so call paths start at the training script
        # as they would for a user, not inside pytest.
        code = "import sys; from dc_torch.demo import run_demo; run_demo(sys.argv[1], steps=6)"
        for run in ("run-a", "run-b"):
            subprocess.run([sys.executable, "-c", code, str(logdir / run)], check=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
        word = "attn"
    write_profile(make_profile(src, 0, (5, 8)), logdir, "zz-hostile")
    return word


def _entry_point_shim(tmp: Path) -> str:
    """A dist-info declaring the plugin entry point, for a source checkout
    that is not pip-installed; empty when the real one is registered."""
    if any(e.name == "deepcontext" for e in metadata.entry_points(group="tensorboard_plugins")):
        return ""
    info = tmp / "shim" / "deepcontext_tab_shim-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deepcontext-tab-shim\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[tensorboard_plugins]\ndeepcontext = dc_core.tensorboard.plugin:DeepContextLoader\n")
    return str(info.parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_tensorboard(logdir: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    paths = [p for p in (_entry_point_shim(tmp), str(REPO), os.environ.get("PYTHONPATH", "")) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    script = shutil.which("tensorboard", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "tensorboard.main"]
    log = open(tmp / "tensorboard.log", "wb")
    proc = subprocess.Popen([*command, "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("tensorboard exited:\n" + (tmp / "tensorboard.log").read_text())
        try:
            with urllib.request.urlopen(url + "/data/plugins_listing", timeout=2) as answer:
                listing = json.load(answer)
            assert listing["deepcontext"]["enabled"], listing["deepcontext"]
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("tensorboard did not answer within 90 s")


@pytest.mark.slow
def test_tab_in_tensorboard_and_chromium(tmp_path: Path, src: Path):
    sync_playwright = _playwright()
    logdir = tmp_path / "logs"
    word = _write_profiles(logdir, src)
    proc, url = _start_tensorboard(logdir, tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    dialogs, errors = [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            # Each wait gets room for a loaded 2-core host (a second suite beside this one
            # made a search take over the 30 s default once); a real hang still fails.
            page.set_default_timeout(90_000)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "/#deepcontext")
            tab = page.frame_locator("iframe")
            rows = tab.locator(".rows .row")
            # The tree shows the run and its forward and backward phases.
            tab.locator(".row .label", has_text="forward").first.wait_for(timeout=60_000)
            assert tab.locator("select[aria-label=Run] option:checked").inner_text() == "run-a"
            assert tab.locator(".row.kind-row-phase .label", has_text="backward").count() == 1
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-tree.png"))
            # Expand a collapsed row: its children arrive from the server.
            closed = tab.locator(".row:has(.toggle:text-is('\u25b8'))").first
            before = rows.count()
            closed.locator(".toggle").click()
            page.wait_for_function("n => document.querySelector('iframe').contentDocument"
                                   ".querySelectorAll('.rows .row').length > n", arg=before)
            # Search highlights matches in the tree.
            tab.locator("input[type=search]").fill(word)
            tab.locator("input[type=search]").press("Enter")
            tab.locator(".row.match mark").first.wait_for()
            assert "matching node" in tab.locator(".search-info").inner_text()
            # Flame graph, then the diff of the two runs.
            tab.locator("button[data-tab=flame]").click()
            tab.locator(".flame .frame").nth(3).wait_for()
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-flame.png"))
            tab.locator("button[data-tab=diff]").click()
            tab.locator(".row .label", has_text="A vs B").wait_for()
            assert tab.locator(".rows .row").count() > 2
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-diff.png"))
            # Hostile names are text: shown literally, nothing runs.
            tab.locator("button[data-tab=tree]").click()
            tab.locator("select[aria-label=Run]").select_option("zz-hostile")
            finding = tab.locator(".finding", has_text=EVIL)
            finding.wait_for()
            finding.locator("a.node-link").click()  # a finding reveals its node in the tree
            tab.locator(".row.selected .label", has_text=EVIL).wait_for()
            tab.locator(".details .label", has_text=EVIL).wait_for()
            assert tab.locator("img").count() == 0
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-hostile.png"))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert dialogs == [] and errors == []
