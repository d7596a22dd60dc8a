"""Screenshots of the DeepContext tab for docs/: every view at two sizes.

    python -m tests.tensorboard.screenshots [--out docs]

Writes the browser test's profiles (real PyTorch runs when torch is here),
starts ``tensorboard --logdir`` on them, opens each view in headless
Chromium through its address (``#deepcontext&dc.view=flame``) and saves
``tab-<view>-<width>x<height>.png``, plus the README's
``tensorboard-tab.png`` (the tree), ``tensorboard-all-ranks.png`` and
``tensorboard-memory.png`` (the Memory view of a real window with memory,
`memory_workload`'s; ``--memory-only`` makes that one alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from tests.tensorboard.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO,
    _start_tensorboard,
    _write_profiles,
)

SIZES = ((1440, 900), (1024, 768))

#: View -> (address keys, a selector inside the tab that says it is drawn).
VIEWS = {
    "tree": ({"run": "run-a", "view": "tree"}, ".findings-strip .strip-item, .rows .row.selected"),
    "flame": ({"run": "run-a", "view": "flame"}, ".flame .frame"),
    "findings": ({"run": "run-a", "view": "findings"}, ".findings-view h3"),
    "steps": ({"run": "run-a", "view": "steps"}, ".charts svg.chart"),
    "diff": ({"run": "run-a", "view": "diff"}, ".rows .row .delta"),
}

#: The Memory view of the run `write_memory_run` writes.
MEMORY = ({"run": "memory", "view": "memory"}, ".memory-chart svg.chart, .rows .row.selected")


def write_memory_run(logdir: Path, src: Path) -> None:
    """``logdir/memory``: `memory_workload`'s real window when torch is here,
    else the tests' planted one (`conftest.memory_profile`)."""
    try:
        import torch  # noqa: F401 (present or not)
    except ImportError:
        from dc_core.store.logdir import write_profile
        from tests.tensorboard.conftest import memory_profile

        print("torch is not installed: the Memory view shows the tests' planted window")
        write_profile(memory_profile(src), logdir, "memory")
        return
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    subprocess.run(
        [sys.executable, "-m", "tests.tensorboard.memory_workload", str(logdir / "memory")],
        check=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))},
    )


def address(url: str, keys: dict[str, str]) -> str:
    return (
        url
        + "/#deepcontext"
        + "".join(f"&dc.{k}={quote(str(v), safe='')}" for k, v in keys.items())
    )


def shoot(page, url: str, keys: dict[str, str], ready: str, path: Path) -> None:
    page.goto("about:blank")  # a fresh load: the tab reads the address once, at its start
    page.goto(address(url, keys))
    tab = page.frame_locator("iframe")
    tab.locator(ready).first.wait_for(timeout=90_000)
    page.wait_for_timeout(500)  # the charts' and the minimap's last paint
    page.screenshot(path=str(path))
    print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def shoot_views(browser, url: str, out: Path) -> None:
    """Every view of `VIEWS` at every size of `SIZES`, and the README's tree and all-ranks shots."""
    for width, height in SIZES:
        page = browser.new_page(viewport={"width": width, "height": height})
        page.on("pageerror", lambda e: print("page error:", e, file=sys.stderr))
        for view, (keys, ready) in VIEWS.items():
            shoot(page, url, keys, ready, out / f"tab-{view}-{width}x{height}.png")
        page.close()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    shoot(page, url, VIEWS["tree"][0], VIEWS["tree"][1], out / "tensorboard-tab.png")
    shoot(
        page,
        url,
        {"run": "zz-ranks", "rank": "all", "view": "tree"},
        ".cell.head.sorted",
        out / "tensorboard-all-ranks.png",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument(
        "--memory-only", action="store_true", help="only the Memory view (tensorboard-memory.png)"
    )
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        work = tmp_path / "work"
        work.mkdir()
        src = work / "model.py"
        src.write_text("import torch\n\ndef forward(x):\n    return x @ x\n")
        if not args.memory_only:
            _write_profiles(tmp_path / "logs", src)
        write_memory_run(tmp_path / "logs", src)
        proc, url = _start_tensorboard(tmp_path / "logs", tmp_path)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                shoot(page, url, *MEMORY, args.out / "tensorboard-memory.png")
                page.close()
                if not args.memory_only:
                    shoot_views(browser, url, args.out)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
