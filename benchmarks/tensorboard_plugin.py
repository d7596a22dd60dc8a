"""The DeepContext tab on a 100k-node profile: every API response < 240 ms,
first render < 1.2 s in headless Chromium (the 300 ms and 1.5 s budgets with
a 20% margin); exits 1, printing OVER, when either is missed.

API timings are taken in-process (TensorBoard's WSGI app, werkzeug Client),
each route cold (first request after start: the profile is read then) and
warm (best of 5); the budget holds the slowest cold answer. First render: a
real ``tensorboard --logdir`` and Chromium, with a cold server (the profile
is read during the render) and a warm one (as when TensorBoard stays open
during training). The time counted is the tab's: from the moment
TensorBoard's page asks for the tab's frame (``plugin_entry.html``) to the
tree's first rows. TensorBoard's own page (a 6 MB script bundle, parsed and
run before any plugin's frame exists) comes first and takes 1-2 s on a
2-core machine, whatever the plugin does; it is printed beside, unbudgeted.

Usage: python benchmarks/tensorboard_plugin.py [--nodes N] [--no-browser]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dc_core.model.tree import Frame, Tree
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile, Series

#: The tab's budgets (300 ms per answer, 1.5 s to first rows) less a 20% margin.
BUDGET_API_S, BUDGET_RENDER_S = 0.240, 1.2


def synthetic(nodes: int, seed: int, steps: tuple[int, int]) -> Profile:
    """A transformer-shaped tree: phase → modules interleaved with Python
    lines → operator → kernel, ``nodes`` nodes, backward under the forward context."""
    rng = random.Random(seed)
    tree = Tree()
    phases = {
        p: tree.child(0, Frame("phase", p))
        for p in ("forward", "backward", "optimizer", "dataloader")
    }
    while len(tree) < nodes:
        phase = rng.choice(
            ("forward", "backward", "forward", "backward", "optimizer", "dataloader")
        )
        node = phases[phase]
        for depth in range(rng.randint(2, 7)):
            if depth % 2 == 0:
                node = tree.child(
                    node,
                    Frame(
                        "module", f"blocks.{rng.randint(0, 40)}.m{depth}", detail=f"Layer{depth}"
                    ),
                )
            else:
                node = tree.child(
                    node,
                    Frame(
                        "python",
                        f"fn{rng.randint(0, 60)}",
                        f"/src/model{depth}.py",
                        rng.randint(1, 900),
                    ),
                )
        op = tree.child(
            node, Frame("operator", f"aten::op{rng.randint(0, 300)}", backward=phase == "backward")
        )
        tree.add(op, "cpu_time_ns", rng.randint(1_000, 100_000))
        tree.add(op, "count", 1)
        kernel = tree.child(op, Frame("kernel", f"sm90_gemm_{rng.randint(0, 800)}"))
        tree.add(kernel, "device_time_ns", rng.randint(1_000, 500_000))
    ticks = list(range(0, 3_000_000_000, 100_000_000))
    return Profile(
        tree=tree,
        steps=steps,
        step_times_ns=[100_000_000 + rng.randint(0, 9_000_000) for _ in range(steps[1] - steps[0])],
        host="bench",
        system=[Series("cpu_percent", -1, ticks, [rng.uniform(20, 90) for _ in ticks])],
    )


def api_timings(logdir: Path, node_count: int) -> list[tuple[str, float, float]]:
    from tensorboard.backend.application import TensorBoardWSGI
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from dc_core.tensorboard.plugin import DeepContextPlugin

    client = Client(TensorBoardWSGI([DeepContextPlugin(TBContext(logdir=str(logdir)))]))
    ref = {"run": "bench", "rank": "0", "window": "5-8", "metric": "device_time_ns"}
    b = {"b_run": "bench", "b_rank": "0", "b_window": "8-11"}
    mid = str(node_count // 2)
    routes = [
        ("runs", {}),
        ("window", ref),
        ("hotpath", {**ref, "node": "0"}),
        ("children", {**ref, "node": "0,1,2,3,4"}),
        ("node", {**ref, "node": mid}),
        ("source", {**ref, "node": mid}),
        ("search", {**ref, "q": "gemm_7"}),
        ("flame", {**ref, "node": "0"}),
        ("flat", ref),
        ("bottomup", {**ref, "kinds": "operator,kernel"}),
        ("bottomup", {**ref, "path": "5"}),
        ("diff", {**ref, **b}),
        ("diff/children", {**ref, **b, "node": "1,2"}),
        ("ranks", ref),
    ]
    results = []
    for route, query in routes:
        times = []
        for _ in range(6):
            start = time.perf_counter()
            response = client.get(f"/data/plugin/deepcontext/{route}", query_string=query)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, (route, response.get_data(as_text=True))
        results.append((route + ("?path" if "path" in query else ""), times[0], min(times[1:])))
    return results


def render_timings(logdir: Path) -> list[tuple[float, float]]:
    """(seconds to the tree's rows from navigation, of which the tab's: from
    its frame's request) per page load: a cold server first, then two warm."""
    from playwright.sync_api import sync_playwright

    from tests.tensorboard.test_browser import CHROMIUM, CHROMIUM_ARGS, _start_tensorboard

    tmp = Path(tempfile.mkdtemp(prefix="dc-bench-tb-"))  # TensorBoard's log, removed with it
    proc, url = _start_tensorboard(logdir, tmp)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            times = []
            for _ in range(3):
                page = browser.new_page(viewport={"width": 1500, "height": 950})
                entry = []
                page.on(
                    "request",
                    lambda r: (
                        entry.append(time.perf_counter()) if "/plugin_entry.html" in r.url else None
                    ),
                )
                start = time.perf_counter()
                page.goto(url + "/#deepcontext")
                page.frame_locator("iframe").locator(".rows .row.kind-row-phase").first.wait_for(
                    timeout=60_000
                )
                done = time.perf_counter()
                times.append((done - start, done - entry[0]))
                page.close()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--no-browser", action="store_true", help="API timings only")
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="dc-bench-"))
    try:
        return run(logdir, args)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run(logdir: Path, args: argparse.Namespace) -> int:
    """Write the profiles, time the routes (and the browser), print; returns the exit status."""
    started = time.perf_counter()
    for seed, steps in ((0, (5, 8)), (1, (8, 11))):
        write_profile(synthetic(args.nodes, seed, steps), logdir, "bench")
    print(
        f"profiles: 2 windows x {args.nodes} nodes written in {time.perf_counter() - started:.1f} s"
    )
    worst = (0.0, "")
    print(f"{'route':<16} {'cold ms':>8} {'warm ms':>8}")
    for route, cold, warm in api_timings(logdir, args.nodes):
        worst = max(worst, (cold, route))
        print(f"{route:<16} {cold * 1e3:8.1f} {warm * 1e3:8.1f}")
    ok = worst[0] < BUDGET_API_S
    print(
        f"slowest API response {worst[0] * 1e3:.0f} ms ({worst[1]}, cold; budget {BUDGET_API_S * 1e3:.0f} ms): "
        f"{'ok' if ok else 'OVER'}"
    )
    if not args.no_browser:
        (cold_all, cold), *warm_runs = render_timings(logdir)
        warm_all, warm = min(warm_runs, key=lambda t: t[1])
        render_ok = max(cold, warm) < BUDGET_RENDER_S
        print(
            f"first render (the tab, from its frame's request to the tree's rows): {cold:.2f} s with a cold server, "
            f"{warm:.2f} s warm (budget {BUDGET_RENDER_S} s): {'ok' if render_ok else 'OVER'}"
        )
        print(
            f"  with TensorBoard's own page before it: {cold_all:.2f} s cold, {warm_all:.2f} s warm (not budgeted)"
        )
        ok = ok and render_ok
    if not ok:
        print("OVER BUDGET", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
