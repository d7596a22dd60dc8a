"""Screenshots of the DeepContext tab for docs/: every view at two sizes.

    python -m tests.tensorboard.screenshots [--out docs]

Writes the browser test's profiles (real PyTorch runs when torch is here),
starts ``tensorboard --logdir`` on them, opens each view in headless
Chromium through its address (``#deepcontext&dc.view=flame``) and saves
``tab-<view>-<width>x<height>.png``, plus the README's
``tensorboard-tab.png`` (the tree) and ``tensorboard-all-ranks.png``.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        work = tmp_path / "work"
        work.mkdir()
        src = work / "model.py"
        src.write_text("import torch\n\ndef forward(x):\n    return x @ x\n")
        _write_profiles(tmp_path / "logs", src)
        proc, url = _start_tensorboard(tmp_path / "logs", tmp_path)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                for width, height in SIZES:
                    page = browser.new_page(viewport={"width": width, "height": height})
                    page.on("pageerror", lambda e: print("page error:", e, file=sys.stderr))
                    for view, (keys, ready) in VIEWS.items():
                        shoot(page, url, keys, ready, args.out / f"tab-{view}-{width}x{height}.png")
                    page.close()
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                shoot(
                    page, url, VIEWS["tree"][0], VIEWS["tree"][1], args.out / "tensorboard-tab.png"
                )
                shoot(
                    page,
                    url,
                    {"run": "zz-ranks", "rank": "all", "view": "tree"},
                    ".cell.head.sorted",
                    args.out / "tensorboard-all-ranks.png",
                )
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
