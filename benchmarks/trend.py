"""A node's trend across a long run: one rank, hundreds of periodic windows.

Writes one rank's windows (`synthetic.py`: ~2,000-node GPT-shaped trees,
seeded noise, `REGRESS_OP` under `REGRESS_MODULE` growing by its original cost each window from
``--regress-from`` on), then times what ``deepcontext report --trend PATH``
does (list the files, read and merge them, find the node, its series) and
`trends` over the merged windows, and checks the answer: the top rising node
is the planted one (its kernel, the deepest node holding the rise), rising
from the planted window (within `RISE_SLACK` windows: see below).

Budgets (2-core machine): trend of one node < 2 s, trends() < 2 s (also with
every node tested), at 500 windows.
Exits 1 when over a budget or when the planted node is not found first.

Usage: python benchmarks/trend.py [--windows 500] [--regress-from 400]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from synthetic import REGRESS_MODULE, REGRESS_OP, rank_profile  # after the path is set

from dc_core.ensemble import PATH_SEP, merge
from dc_core.ensemble.outliers import time_metric
from dc_core.ensemble.series import series, trends
from dc_core.store.logdir import find_profiles, write_profile

BUDGET_SERIES_S, BUDGET_TRENDS_S = 2.0, 2.0
STEP_START, EVERY = 10, 100  # the first window's first step, steps between window starts
RISE_SLACK = 3


def planted_path() -> str:
    """The forward regressing operator's path as the report prints it (what a user passes to --trend)."""
    tree = rank_profile(0, 1, 0).tree
    for node in range(len(tree)):
        frames = tree.path_frames(node)
        if (
            frames
            and frames[-1].name == REGRESS_OP
            and not frames[-1].backward
            and any(f.name == REGRESS_MODULE for f in frames)
        ):
            return PATH_SEP.join(f.label() for f in frames)
    raise SystemExit("synthetic.py has no planted node")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=500)
    parser.add_argument("--regress-from", type=int, default=400)
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="dc-bench-trend-"))
    try:
        return run(logdir, args.windows, args.regress_from)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run(logdir: Path, windows: int, regress_from: int) -> int:
    started = time.perf_counter()
    for window in range(windows):
        write_profile(
            rank_profile(
                0, 1, window, regress_from=regress_from, step_start=STEP_START, every=EVERY
            ),
            logdir,
            "bench",
        )
    size = sum(p.stat().st_size for p in logdir.rglob("*.pb"))
    print(
        f"{windows} windows of rank 0 ({size / 2**20:.1f} MiB) written in {time.perf_counter() - started:.1f} s; "
        f"{REGRESS_OP} in {REGRESS_MODULE} grows from window {regress_from}"
    )
    path = planted_path()

    # What `report --trend PATH` does: list, read + merge, find, series.
    t0 = time.perf_counter()
    files = [f for f in find_profiles(logdir) if f.rank == 0]
    ensemble, errors = merge(files)
    node = ensemble.find(path)
    metric = time_metric(ensemble)
    points = series(ensemble, node, metric) if node is not None else []
    series_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    found = trends(ensemble, metric, min_share=0.02, alpha=0.01, min_rise=0.01)
    trends_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the worst case: every node tested
    trends(ensemble, metric, min_share=0.0, alpha=0.01, min_rise=0.01)
    every_s = time.perf_counter() - t0

    ok = True
    print(
        f"merged tree: {len(ensemble):,} nodes x {len(ensemble.columns)} windows; {len(errors)} unreadable"
    )
    verdict = "ok" if series_s < BUDGET_SERIES_S else f"OVER the {BUDGET_SERIES_S:.0f} s budget"
    print(f"trend of one node (list + read + merge + series): {series_s:6.2f} s  ({verdict})")
    ok &= series_s < BUDGET_SERIES_S and node is not None and len(points) == windows
    if points:
        print(
            f"  its share: {100 * points[0].share:.2f}% (window 0) -> {100 * points[regress_from - 1].share:.2f}% "
            f"(window {regress_from - 1}) -> {100 * points[-1].share:.2f}% (last)"
        )
    verdict = "ok" if trends_s < BUDGET_TRENDS_S else f"OVER the {BUDGET_TRENDS_S:.0f} s budget"
    print(
        f"trends() (nodes reaching 2% in some window):     {trends_s:6.2f} s  ({verdict}); "
        f"{len(found)} rising node(s)"
    )
    verdict = "ok" if every_s < BUDGET_TRENDS_S else f"OVER the {BUDGET_TRENDS_S:.0f} s budget"
    print(f"trends() testing every node (min_share 0):       {every_s:6.2f} s  ({verdict})")
    ok &= trends_s < BUDGET_TRENDS_S and every_s < BUDGET_TRENDS_S
    for t in found[:5]:
        print(
            f"  +{100 * t.rise:5.1f} points  p={t.p:.1e}  from step {t.windows[t.first_rise][0]:>6}  "
            f"{ensemble.label(t.node)}"
        )
    top = [ensemble.node_frame(n) for n in ensemble.path(found[0].node)] if found else []
    planted = any(f.name == REGRESS_MODULE for f in top) and any(f.name == REGRESS_OP for f in top)
    first = found[0].first_rise if found else -1
    # Growth of 6 % a window under ±7 % noise per operator is not clearly
    # above the baseline in its first window or two: allow RISE_SLACK windows.
    print(
        f"planted growth from window {regress_from}; first window clearly above the baseline: {first}"
    )
    if not planted or not 0 <= first - regress_from <= RISE_SLACK:
        print(
            f"FAILED: the top rising node should be {REGRESS_OP} in {REGRESS_MODULE}, rising from window "
            f"{regress_from} (+{RISE_SLACK})"
        )
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
