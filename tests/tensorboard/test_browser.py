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

from dc_core.cli.present import format_value
from dc_core.model import kinds
from dc_core.store.logdir import write_profile
from tests.tensorboard.conftest import EVIL, make_profile
from tests.tensorboard.test_static import FORMAT_CASES, expected_formats

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
LONG_LINE = "a source line far wider than the side panel " * 4 + "END"


def _need(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"{what} is required in CI for the browser test (.ci/run installs it)", pytrace=False
        )
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
        import torch  # noqa: F401 (present or not)

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
            subprocess.run(
                [sys.executable, "-c", code, str(logdir / run)],
                check=True,
                timeout=300,
                env={
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(
                        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
                    ),
                },
            )
        # the diff's increases are planted: two runs alone differ by noise either way
        _slower(logdir / "run-b", 3)
        word = "attn"
    hostile = make_profile(src, 0, (5, 8))
    note = {
        "rule": "note",
        "message": "fyi",
        "suggestion": "",
        "path": [],
        "evidence": {},
        "node": -1,
    }
    hostile.findings = [
        {**note, "severity": "info", "gain_ns": None, "gain_basis": "a note"},
        *hostile.findings,
        {**note, "severity": "critical", "gain_ns": 5_000_000, "gain_basis": "the planted cost"},
    ]
    write_profile(hostile, logdir, "zz-hostile")
    # Three ranks of one window, rank 2's forward aten::mm 5x; rank 2 also has a later window.
    for rank, scale in ((0, 1), (1, 1), (2, 5)):
        write_profile(make_profile(src, rank, (5, 8), scale), logdir, "zz-ranks")
    write_profile(make_profile(src, 2, (8, 10), 2), logdir, "zz-ranks")
    return word


def _slower(run_dir: Path, factor: int) -> None:
    """Every CPU time in ``run_dir``'s profiles ``factor`` times what was
    measured (the tree's, the steps' and their bounds alike, so the profile
    stays whole)."""
    from dc_core.store.logdir import find_profiles, read_profile, rewrite_profile

    for file in find_profiles(run_dir):
        profile = read_profile(file.path)
        tree = profile.tree
        tree.excl["cpu_time_ns"] = [v * factor for v in tree.excl["cpu_time_ns"]]
        profile.step_times_ns = [t * factor for t in profile.step_times_ns]
        profile.step_bounds = {
            k: [v * factor for v in vs] if k.startswith("cpu_time_ns.") else vs
            for k, vs in profile.step_bounds.items()
        }
        rewrite_profile(profile, file.path)


def _wait_until(page, condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(100)


def _entry_point_shim(tmp: Path) -> str:
    """A dist-info declaring the plugin entry point, for a source checkout
    that is not pip-installed; empty when the real one is registered."""
    if any(e.name == "deepcontext" for e in metadata.entry_points(group="tensorboard_plugins")):
        return ""
    info = tmp / "shim" / "deepcontext_tab_shim-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: deepcontext-tab-shim\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(
        "[tensorboard_plugins]\ndeepcontext = dc_core.tensorboard.plugin:DeepContextLoader\n"
    )
    return str(info.parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_tensorboard(
    logdir: Path, tmp: Path, source_root: Path | None = None
) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    paths = [p for p in (_entry_point_shim(tmp), str(REPO), os.environ.get("PYTHONPATH", "")) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    if source_root is not None:  # the tab may show the test's own source file
        env["DEEPCONTEXT_SOURCE_ROOTS"] = str(source_root)
    script = shutil.which("tensorboard", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "tensorboard.main"]
    log = open(tmp / "tensorboard.log", "wb")
    proc = subprocess.Popen(
        [*command, "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
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
    from playwright.sync_api import expect

    logdir = tmp_path / "logs"
    # shown beside line 3: it must wrap, not be cut
    src.write_text(src.read_text() + f"    # {LONG_LINE}\n")
    word = _write_profiles(logdir, src)
    proc, url = _start_tensorboard(logdir, tmp_path, src.parent)
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
            # Metric names come from /runs (the vocabulary), and numbers are written as the CLI writes them.
            labels = [label for _, label in kinds.METRICS.values()]
            shown = tab.locator("select[aria-label=Metric] option").all_inner_texts()
            assert shown and set(shown) <= set(labels), shown
            formats = page.evaluate(
                """async ([cases, units]) => {
                const { formatNumber } = await import("/data/plugin/deepcontext/static/format.js");
                return Object.fromEntries(units.map((u) => [u, cases.map((v) => formatNumber(v, u))]));
            }""",
                [FORMAT_CASES, list(expected_formats())],
            )
            assert formats == expected_formats()
            # A header click sorts; the Value selector (bars, bottom-up) stays as it was.
            with page.expect_request(lambda r: "/hotpath?" in r.url and "sort=excl" in r.url):
                tab.locator(".cell.head", has_text="Exclusive").click()
            tab.locator(".cell.head.sorted", has_text="Exclusive").wait_for()
            assert tab.locator("select[aria-label=Value]").input_value() == "incl"
            tab.locator(".cell.head", has_text="Inclusive").click()
            tab.locator(".cell.head.sorted", has_text="Inclusive").wait_for()
            # Expand a collapsed row: its children arrive from the server.
            closed = tab.locator(".row:has(.toggle:text-is('\u25b8'))").first
            before = rows.count()
            closed.locator(".toggle").click()
            page.wait_for_function(
                "n => document.querySelector('iframe').contentDocument"
                ".querySelectorAll('.rows .row').length > n",
                arg=before,
            )
            # Search highlights matches in the tree.
            tab.locator("input[type=search]").fill(word)
            tab.locator("input[type=search]").press("Enter")
            tab.locator(".row.match mark").first.wait_for()
            assert "matching node" in tab.locator(".search-info").inner_text()
            # A slow answer for a view left meanwhile does not replace the current view.
            held = []

            def slow_flame(url: str) -> bool:
                return "/deepcontext/flame?" in url

            def hold(route) -> None:  # answered below, after the view changed
                held.append(route)

            page.route(slow_flame, hold)
            tab.locator("button[data-tab=flame]").click()
            _wait_until(page, lambda: held, "the flame request")
            tab.locator("button[data-tab=tree]").click()
            tab.locator(".row .label", has_text="forward").first.wait_for()
            with page.expect_response(lambda r: "/deepcontext/flame?" in r.url):
                held[0].continue_()
            page.unroute(slow_flame)
            page.wait_for_timeout(300)
            assert (
                tab.locator(".flame").count() == 0
                and tab.locator(".row .label", has_text="forward").count() > 0
            )
            assert tab.locator("button.tab.active").inner_text() == "Tree"
            # Flame graph, then the diff of the two runs.
            tab.locator("button[data-tab=flame]").click()
            tab.locator(".flame .frame").nth(3).wait_for()
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-flame.png"))
            check_flame(page, tab, url)
            tab.locator("button[data-tab=diff]").click()
            tab.locator(".row .label", has_text="A vs B").wait_for()
            assert tab.locator(".rows .row").count() > 2
            check_diff(tab)
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-diff.png"))
            # Hostile names are text: shown literally, nothing runs.
            tab.locator("button[data-tab=tree]").click()
            tab.locator("select[aria-label=Run]").select_option("zz-hostile")
            # Above the tree, the three findings that save the most, by gain; one
            # with a node selects it. Waited for by content: until the new run's
            # findings arrive, the strip is the previous run's.
            strip = tab.locator(".strip-item b")
            hostile = ["note", "note", "slow_module"]
            _wait_until(page, lambda: strip.all_inner_texts() == hostile, "the run's findings")
            # the critical one
            assert (
                tab.locator(".strip-item .strip-gain").first.inner_text()
                == "\u2248 5.0 ms per step"
            )
            tab.locator(".strip-item.linked", has_text=EVIL).click()
            tab.locator(".row.selected .label", has_text=EVIL).wait_for()
            tab.locator(".details .label", has_text=EVIL).wait_for()
            # A copied link opens that node: the address names it, a new page selects it.
            _wait_until(
                page,
                lambda: "dc.run=zz-hostile" in page.url and "dc.view=tree" in page.url,
                "the address",
            )
            node = tab.locator(".row.selected").get_attribute("data-key")
            assert f"dc.node={node}" in page.url
            linked = browser.new_page(viewport={"width": 1024, "height": 768})
            linked.goto(page.url)
            there = linked.frame_locator("iframe")
            there.locator(".row.selected .label", has_text=EVIL).wait_for()
            there.locator(".details .label", has_text=EVIL).wait_for()
            assert there.locator("select[aria-label=Run]").input_value() == "zz-hostile"
            linked.close()
            # The Findings view holds them all; a finding's link selects its node in the tree.
            tab.locator("button[data-tab=findings]").click()
            finding = tab.locator(".finding", has_text=EVIL)
            finding.wait_for()
            # no longer at the bottom of the side panel
            assert tab.locator(".side .finding").count() == 0
            finding.locator("a.node-link").click()
            tab.locator(".row.selected .label", has_text=EVIL).wait_for()
            assert tab.locator("img").count() == 0
            # the details follow the selection: on a loaded machine a moment later
            tab.locator(".details .label", has_text=EVIL).wait_for()
            tab.locator(".details tr[data-metric=cpu_time_ns]").wait_for()
            cells = tab.locator(".details tr[data-metric=cpu_time_ns] td").all_inner_texts()
            assert (
                cells
                == ["CPU time", format_value(20, "cpu_time_ns"), format_value(0, "cpu_time_ns")]
                == ["CPU time", "20 ns", "0 ns"]
            )
            # Findings are ordered by the vocabulary's severities, most severe first.
            tab.locator("button[data-tab=findings]").click()
            tab.locator(".finding").nth(2).wait_for()
            assert tab.locator(".finding .sev").all_text_contents() == list(kinds.SEVERITIES)
            # Each says what its fix saves, and why.
            assert (
                tab.locator(".finding.sev-critical .gain").inner_text()
                == "saves ≈ 5.0 ms per step: the planted cost"
            )
            assert (
                tab.locator(".finding.sev-info .gain").inner_text()
                == "saves none estimated: a note"
            )
            # A match three levels under the loaded rows (forward is closed, the hot
            # path runs through backward) opens in one go.
            assert tab.locator(".row .label", has_text="aten::relu").count() == 0
            tab.locator("input[type=search]").fill("relu")
            tab.locator("input[type=search]").press("Enter")
            tab.locator(".row.match.selected mark", has_text="relu").wait_for()
            assert tab.locator(".search-info").inner_text() == "1 matching node"
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-hostile.png"))
            check_steps(tab)
            check_source(tab)
            # The flat view filters by a kind from the vocabulary.
            tab.locator("button[data-tab=flat]").click()
            # all_inner_texts does not wait: on a loaded machine the flat view may not be drawn yet
            tab.locator("select[aria-label=Kinds] option", has_text="phase").wait_for(
                state="attached"
            )
            options = tab.locator("select[aria-label=Kinds] option").all_inner_texts()
            # those present, in KINDS order
            assert options == [
                "all kinds",
                "python",
                "module",
                "operator",
                "kernel",
                "phase",
            ]
            tab.locator("select[aria-label=Kinds]").select_option("kernel")
            tab.locator(".row.kind-row-kernel").first.wait_for()
            assert tab.locator(".rows .row .label").all_inner_texts() == ["sgemm"]
            # All ranks: the window's ranks merged, the spread per node; a node's
            # distribution; then the rank holding the max, at the same call path.
            tab.locator("select[aria-label=Run]").select_option("zz-ranks")
            tab.locator("select[aria-label=Rank] option", has_text="All ranks (3)").wait_for(
                state="attached"
            )
            tab.locator("select[aria-label=Rank]").select_option("all")
            tab.locator(".cell.head", has_text="Max rank").wait_for()
            assert tab.locator("button[data-tab=flat]").count() == 0  # one rank's views step aside
            mm = (
                tab.locator(".rows .row", has=tab.locator(".label", has_text="aten::mm"))
                .filter(has_not=tab.locator(".label", has_text="backward"))
                .first
            )
            mm.wait_for()
            assert mm.locator(".cell.max-rank").inner_text() == "2"
            # Search stays in All ranks: it searches the merged tree.
            tab.locator("input[type=search]").fill("relu")
            tab.locator("input[type=search]").press("Enter")
            tab.locator(".search-info", has_text="1 matching node").wait_for()
            assert tab.locator("select[aria-label=Rank]").input_value() == "all"
            assert tab.locator(".row.selected .label").inner_text().startswith("aten::relu")
            tab.locator("input[type=search]").fill("")
            tab.locator("input[type=search]").press("Enter")
            mm.locator(".label").click()
            tab.locator(".histogram rect.bin").first.wait_for()
            assert tab.locator(".histogram rect.bin").count() == 3  # three ranks, three bins
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-all-ranks.png"))
            tab.locator("a.jump-max", has_text="(2)").click()
            # the merged view had aten::mm selected already: wait for the rank to change, then for the row
            expect(tab.locator("select[aria-label=Rank]")).to_have_value("2", timeout=90_000)
            tab.locator(".row.selected .label", has_text="aten::mm").wait_for()
            tab.locator(
                ".details tr[data-metric=cpu_time_ns] td",
                has_text=format_value(1500, "cpu_time_ns"),
            ).first.wait_for()
            # Windows: the selected node's cost in each of rank 2's windows.
            tab.locator("button[data-tab=windows]").click()
            tab.locator(".windows tr[data-window]").nth(1).wait_for()
            page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-windows.png"))
            cells = [
                r.split("\t") for r in tab.locator(".windows tr[data-window]").all_inner_texts()
            ]
            assert [c[:2] for c in cells] == [
                ["steps 5–7", format_value(1500, "cpu_time_ns")],
                ["steps 8–9", format_value(600, "cpu_time_ns")],
            ]
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert dialogs == [] and errors == []


def _frames(tab) -> list[dict]:
    return tab.locator(".flame .frame").evaluate_all("""fs => fs.map((f) => ({
        id: f.dataset.id, depth: Number(f.dataset.depth), text: f.textContent, left: parseFloat(f.style.left),
        width: parseFloat(f.style.width), bottom: f.style.bottom, classes: [...f.classList]}))""")


def _selected(tab) -> str:
    return tab.locator(".flame .frame.selected").get_attribute("data-id")


def check_flame(page, tab, url: str) -> None:
    """The flame graph fills the pane, its labels are whole or cut in the
    middle, it zooms and comes back, the keyboard moves the selection,
    a search dims what it does not match, it turns upside down, and a
    reload keeps the zoom and the orientation."""
    # The pane's full width and height: the graph ends where the pane ends.
    view = tab.locator(".view").bounding_box()
    wrap = tab.locator(".flame-wrap").bounding_box()
    assert (
        abs((wrap["x"] + wrap["width"]) - (view["x"] + view["width"])) < 20
        and wrap["width"] > view["width"] - 40
    )
    assert abs((wrap["y"] + wrap["height"]) - (view["y"] + view["height"])) < 20
    frames = _frames(tab)
    root = frames[0]
    assert root["depth"] == 0 and root["width"] > view["width"] - 40
    for f in frames:  # a label is whole, cut in the middle, or left out; never a bare prefix
        assert not f["text"].endswith("\u2026"), f
        if "\u2026" in f["text"]:
            head, tail = f["text"].split("\u2026")
            assert len(head) >= 3 and len(tail) >= 3, f
    assert any(f["text"] == "forward" for f in frames)
    # The minimap shows the whole window: its window spans all of it at the root.
    assert tab.locator(".minimap canvas").count() == 1
    assert tab.locator(".minimap-window").evaluate("e => e.style.width") == "100%"
    assert tab.locator("button.back").is_disabled()
    # Click zooms: the phase fills the width, the crumbs and the minimap say where.
    forward = next(f for f in frames if f["text"] == "forward")
    tab.locator(f".flame .frame[data-id='{forward['id']}']").click()
    tab.locator(".crumb-here", has_text="forward").wait_for()
    assert tab.locator(".crumbs a").all_inner_texts()[-1].startswith("steps ")
    assert (
        0 < float(tab.locator(".minimap-window").evaluate("e => parseFloat(e.style.width)")) < 100
    )
    assert _frames(tab)[0]["id"] == forward["id"] and _selected(tab) == forward["id"]
    _wait_until(page, lambda: f"dc.zoom={forward['id']}" in page.url, "the zoom in the address")
    # Keys: down to the heaviest child, right to its neighbour, up to the parent,
    # Enter zooms into the selection, Escape zooms back out.
    tab.locator(".flame-wrap").focus()
    tab.locator(".flame-wrap").press("ArrowDown")
    child = next(f for f in _frames(tab) if f["depth"] == 1 and f["left"] == 0)
    assert _selected(tab) == child["id"]
    row = sorted((f for f in _frames(tab) if f["depth"] == 1), key=lambda f: f["left"])
    tab.locator(".flame-wrap").press("ArrowRight")
    assert _selected(tab) == (row[1]["id"] if len(row) > 1 else child["id"])
    tab.locator(".flame-wrap").press("ArrowLeft")
    tab.locator(".flame-wrap").press("Enter")
    _wait_until(
        page,
        lambda: tab.locator(".flame .frame").count() and _frames(tab)[0]["id"] == child["id"],
        "the keyboard zoom",
    )
    tab.locator(".flame-wrap").press("Escape")
    _wait_until(
        page,
        lambda: tab.locator(".flame .frame").count() and _frames(tab)[0]["id"] == forward["id"],
        "zooming back",
    )
    assert _selected(tab) == child["id"]  # the frame zoomed out of stays selected
    tab.locator("button.back").click()
    tab.locator(".crumb-here", has_text="steps ").wait_for()
    # Search: matching frames highlighted, the others dimmed.
    tab.locator("input[type=search]").fill("forward")
    tab.locator("input[type=search]").press("Enter")
    tab.locator(".flame .frame.match").first.wait_for()
    shown = _frames(tab)
    assert "matching frame" in tab.locator(".search-info").inner_text()
    assert all("match" in f["classes"] or "dim" in f["classes"] for f in shown)
    assert any(f["text"] == "forward" and "match" in f["classes"] for f in shown)
    assert all("dim" in f["classes"] for f in shown if f["text"] in ("backward", "optimizer"))
    tab.locator("input[type=search]").fill("")
    tab.locator("input[type=search]").press("Enter")
    assert tab.locator(".flame .frame.dim").count() == 0
    # Flame orientation: the root at the bottom; the address and a reload keep it.
    tab.locator("button[data-orientation=flame]").click()
    tab.locator(".flame.flame .frame").first.wait_for()
    assert _frames(tab)[0]["bottom"] == "0px"
    assert tab.locator("button[data-orientation=flame]").get_attribute("aria-pressed") == "true"
    tab.locator(".flame .frame", has_text="forward").first.click()
    tab.locator(".crumb-here", has_text="forward").wait_for()
    _wait_until(
        page, lambda: "dc.orient=flame" in page.url and "dc.view=flame" in page.url, "the address"
    )
    page.reload()
    tab.locator(".crumb-here", has_text="forward").wait_for()
    assert tab.locator("button.tab.active").inner_text() == "Flame graph"
    assert tab.locator(".flame.flame").count() == 1
    tab.locator("button[data-orientation=icicle]").click()
    tab.locator(".flame.icicle .frame").first.wait_for()


def check_diff(tab) -> None:
    """Increases red, decreases green, cells and bars; B's Rank names ranks as the top bar does."""
    tab.locator(
        ".rows .delta.worse"
    ).first.wait_for()  # the rows come as their answers do, not all at once
    worse = tab.locator(".rows .delta.worse").all_inner_texts()
    better = tab.locator(".rows .delta.better").all_inner_texts()
    assert (
        worse and all(t.startswith("+") for t in worse) and all(t.startswith("-") for t in better)
    )
    colours = tab.locator(".rows").evaluate("""rows => ["worse", "better"].map((c) => {
        const span = document.createElement("span"); span.className = `delta ${c}`; rows.appendChild(span);
        const bar = document.createElement("div"); bar.className = `bar ${c}`; rows.appendChild(bar);
        const got = [getComputedStyle(span).color, getComputedStyle(bar).backgroundColor]; span.remove(); bar.remove();
        return got; })""")
    assert colours == [
        ["rgb(198, 40, 40)", "rgb(198, 40, 40)"],
        ["rgb(46, 125, 50)", "rgb(46, 125, 50)"],
    ]
    assert tab.locator(".rows .bar.worse").count() > 0
    top = [
        t
        for t in tab.locator(".toolbar select[aria-label=Rank] option").all_inner_texts()
        if not t.startswith("All")
    ]
    assert tab.locator(".subbar select[aria-label=Rank] option").all_inner_texts() == top
    assert top[0] == "0 (" + top[0].split(" (")[1] and top[0].endswith(")")


def check_steps(tab) -> None:
    """The hostile run's window: step times 10, 12, 30 ms; cores named cpu N; the disk counter as a rate."""
    tab.locator("button[data-tab=steps]").click()
    tab.locator(".chart-box[data-series=disk_read_bytes]").wait_for()
    assert tab.locator(".charts > .chart-box").count() == 3  # steps, cpu, disk: one grid
    steps = tab.locator(".chart-box").first.locator(".y-tick").all_text_contents()
    assert steps == ["0 ms", "10 ms", "20 ms", "30 ms"]
    cpu = tab.locator(".chart-box[data-series=cpu_percent]")
    assert cpu.locator(".legend .key").all_inner_texts() == ["all", "cpu 0", "cpu 1"]
    assert "device" not in cpu.inner_text()
    disk = tab.locator(".chart-box[data-series=disk_read_bytes]")
    assert disk.locator("h4").inner_text() == "disk_read rate (bytes/s)"
    assert disk.locator(".y-tick").all_text_contents() == [
        "0 MiB/s",
        "50 MiB/s",
        "100 MiB/s",
        "150 MiB/s",
        "200 MiB/s",
    ]
    assert disk.locator(".x-tick").all_text_contents() == [
        "0 s",
        "0.2 s",
        "0.4 s",
        "0.6 s",
        "0.8 s",
        "1 s",
    ]


def check_source(tab) -> None:
    """A source line wider than the side panel wraps: all of it is on screen."""
    tab.locator("input[type=search]").fill("model.py")
    tab.locator("input[type=search]").press("Enter")
    long_line = tab.locator(".source .src-line", has_text="END")
    long_line.wait_for()
    assert LONG_LINE in long_line.inner_text()
    size = tab.locator(".source").evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert size[0] <= size[1] + 1, size
    box, panel = long_line.bounding_box(), tab.locator(".side").bounding_box()
    # wrapped onto lines
    assert box["x"] + box["width"] <= panel["x"] + panel["width"] and box["height"] > 30
    tab.locator("input[type=search]").fill("")
    tab.locator("input[type=search]").press("Enter")
