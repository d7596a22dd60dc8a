"""`deepcontext analyze` against an earlier version of itself: one 100k-node
window, and a window of 1,024 ranks (`synthetic.py`).

Both versions run the same command on the same files in fresh processes,
interleaved round by round; the ratio of their best times is what is
printed (absolute times on a shared machine are noise). The earlier version
is a git ref checked out into a temporary worktree (the analyzer is pure
Python: it needs no build).

Budget: within +20% of the earlier version on both.

Usage: python benchmarks/analyze.py [--base REF] [--nodes 100000] [--ranks 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from synthetic import write_run

from dc_core.model.tree import Frame, Tree  # after the path is set
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

BUDGET = 1.20
OPS = (
    "aten::linear",
    "aten::add",
    "aten::mul",
    "aten::to",
    "aten::contiguous",
    "aten::layer_norm",
    "aten::item",
    "aten::cumprod",
    "aten::softmax",
    "aten::pow",
    "aten::mean",
    "aten::rsqrt",
)


def big_profile(nodes: int, steps: int = 8, seed: int = 0) -> Profile:
    """A window of about ``nodes`` nodes: lines calling lines calling operators,
    in forward, backward and optimizer, with per-step bounds."""
    rng = random.Random(seed)
    tree = Tree()
    while len(tree) < nodes:
        phase = rng.choice(("forward", "backward", "optimizer"))
        node = tree.child(0, Frame("phase", phase))
        for _ in range(rng.randint(2, 8)):
            node = tree.child(
                node,
                Frame(
                    "python",
                    f"f{rng.randint(0, 40)}",
                    f"m{rng.randint(0, 9)}.py",
                    rng.randint(1, 400),
                ),
            )
        op = tree.child(node, Frame("operator", rng.choice(OPS), backward=phase == "backward"))
        tree.add(op, "cpu_time_ns", rng.randint(1_000, 2_000_000))
        tree.add(op, "count", steps * rng.randint(1, 4))
        tree.add(node, "cpu_time_ns", rng.randint(0, 50_000))
    own = tree.excl["cpu_time_ns"]
    low = [int(v / steps * rng.uniform(0.7, 1.0)) for v in own]
    high = [int(v / steps * rng.uniform(1.0, 1.6)) for v in own]
    step = sum(own) // steps
    return Profile(
        tree=tree,
        steps=(10, 10 + steps),
        step_times_ns=[step] * steps,
        framework="pytorch",
        step_bounds={"cpu_time_ns.min": low, "cpu_time_ns.max": high},
        step_wait_ns=[0] * steps,
    )


def timed(source: Path, *args: str) -> float:
    """Seconds of ``deepcontext analyze --dry-run`` from ``source`` in a fresh process."""
    # An editable install's finder (module _editable…) maps dc_core to its own checkout
    # ahead of PYTHONPATH: it is left out, or both sides would run the same code.
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if '_editable' not in "
        "(getattr(f, '__module__', '') or '') + type(f).__module__]; "
        f"import dc_core; assert dc_core.__file__.startswith({str(source)!r}), dc_core.__file__; "
        "from dc_core.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "analyze", "--dry-run", *args],
        cwd=source,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(source)},
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"analyze failed in {source}: {done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the earlier version (a git ref)")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            big = tmp / "big"
            write_profile(big_profile(args.nodes), big, "bench")
            ranks = tmp / "ranks"
            write_run(ranks, args.ranks, slow_rank=args.ranks // 3)
            cases = {f"{args.nodes:,}-node window": big, f"{args.ranks:,} ranks": ranks}
            ok = True
            for name, logdir in cases.items():
                best = {"this": float("inf"), "base": float("inf")}
                for _ in range(args.rounds):
                    best["this"] = min(best["this"], timed(ROOT, str(logdir)))
                    best["base"] = min(best["base"], timed(base, str(logdir)))
                ratio = best["this"] / best["base"]
                ok &= ratio <= BUDGET
                print(
                    f"{name}: {best['this']:.2f} s against {best['base']:.2f} s at {args.base} "
                    f"(x{ratio:.2f}, budget x{BUDGET:.2f})"
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
