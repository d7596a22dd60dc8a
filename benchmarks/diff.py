"""How long ``deepcontext diff A B`` takes on two 100k-node windows.

Writes two synthetic transformer-shaped profiles (the tab benchmark's
`synthetic`), B with every 97th node's device time raised, and times the
command end to end (reading both files, one walk of both trees, the top
changes printed) as a table and as --json. Target: under 3 s each here.

Usage: python benchmarks/diff.py [--nodes N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tensorboard_plugin import synthetic

from dc_core.cli import main as cli
from dc_core.store.logdir import write_profile

TARGET_S = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = synthetic(args.nodes, 1, (5, 8)), synthetic(args.nodes, 1, (5, 8))
        for node in range(0, len(b.tree), 97):
            b.tree.add(node, "device_time_ns", 5_000)
        paths = [str(write_profile(p, Path(tmp) / name, name)) for name, p in (("a", a), ("b", b))]
        worst = 0.0
        for extra in ([], ["--json"]):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                status = cli(["diff", *paths, *extra])
            took = time.perf_counter() - start
            worst = max(worst, took)
            print(
                f"diff {' '.join(extra) or '(table)':8} {len(a.tree):,} nodes: {took:.2f} s (status {status})"
            )
    print(
        f"slowest {worst:.2f} s (target {TARGET_S:.0f} s): {'ok' if worst < TARGET_S else 'OVER'}"
    )
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
