"""`deepcontext report` on a window of thousands of ranks: the cross-rank tree
and the outlier ranks, streamed from the rank files.

Writes N rank files of one window (`synthetic.py`: ~2,000-node trees, seeded
per-rank noise, one planted slow rank whose extra work is in one MLP while
the other ranks wait for it in their all-reduce), then runs the report in a
fresh process, cold (no summary index yet) and warm (the index is read), and
checks what it says: the planted rank is the top outlier and its MLP is named.

Budgets (2-core machine): cold report < 30 s and peak RSS < 2 GiB at 4,096 ranks.

Usage: python benchmarks/cross_rank.py [--ranks 4096]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from synthetic import SLOW_MODULE, write_run  # after the path is set

BUDGET_S, BUDGET_RSS = 30.0, 2 << 30


def report(logdir: Path, *args: str) -> tuple[float, int, str]:
    """Seconds, peak RSS (bytes) and stdout of ``deepcontext report`` in a fresh process."""
    code = (
        "import resource, sys; from dc_core.cli import main; rc = main(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "report", str(logdir), *args],
        capture_output=True,
        text=True,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"},
        cwd=HERE.parent,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"report failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, int(done.stderr.strip().splitlines()[-1]) * 1024, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="dc-bench-ranks-"))
    slow = args.ranks * 5 // 7
    started = time.perf_counter()
    write_run(logdir, args.ranks, slow_rank=slow)
    size = sum(p.stat().st_size for p in logdir.rglob("*.pb"))
    print(
        f"{args.ranks:,} rank files ({size / 2**20:.0f} MiB) written in {time.perf_counter() - started:.1f} s; "
        f"planted slow rank {slow}"
    )
    cold, rss, text = report(logdir)
    warm, warm_rss, _ = report(logdir)
    js_time, _, js = report(logdir, "--json")
    doc = json.loads(js)
    top = doc["merged"][0]["outliers"][0] if doc["merged"][0]["outliers"] else None
    found = (
        top is not None
        and top["rank"] == slow
        and any(SLOW_MODULE in p for p in top["node"]["path"])
    )
    print(
        f"cross-rank report: cold {cold:.1f} s (peak RSS {rss / 2**20:.0f} MiB), warm {warm:.1f} s "
        f"(RSS {warm_rss / 2**20:.0f} MiB), --json {js_time:.1f} s, {len(text.splitlines())} lines printed"
    )
    print(
        f"top outlier: rank {top and top['rank']} ({top and top['measure']}, z {top and top['z']}), "
        f"named node: {top and ' > '.join(top['node']['path'][-2:])}: {'ok' if found else 'WRONG'}"
    )
    ok = cold < BUDGET_S and rss < BUDGET_RSS and found
    print(
        f"budget: cold < {BUDGET_S:.0f} s, RSS < {BUDGET_RSS >> 30} GiB: {'ok' if ok else 'OVER'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
