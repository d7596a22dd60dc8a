"""Hot-path cost of the collector: native vs. the pure-Python reference, same run.

Run: ``.venv/bin/python benchmarks/collector.py [--quick]``. Prints ns per
operation (best of several repeats) for

* an enter/exit pair without capture (user depth measured, and given as 0),
* an enter/exit pair with capture at Python stack depth 10/30/100,
* one ``python_frames()`` capture at those depths,
* ``snapshot()`` of a 100k-node tree,

and the reference/native ratio for each. Targets: enter/exit + capture at
depth 30 under 2 µs; native at least 20x faster than the reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dc_core import reference

try:
    from dc_core import _native
except ImportError:  # still useful for the reference numbers
    _native = None

DEPTHS = (10, 30, 100)


def stack_depth() -> int:
    frame, n = sys._getframe(1), 0
    while frame is not None:
        n, frame = n + 1, frame.f_back
    return n


def at_depth(depth: int, fn):
    """Call ``fn`` with the Python stack ``depth`` frames deep (fn's caller included)."""

    def down(n):
        return down(n - 1) if n > 0 else fn()

    return down(max(depth - stack_depth() - 2, 0))


def best_ns(fn, loops: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(loops)
        best = min(best, (time.perf_counter_ns() - t0) / loops)
    return best


def measure(cls, loops: int, repeats: int) -> dict[str, float]:
    c = cls()
    op = c.intern(reference.KIND_OPERATOR, "aten::mm")
    frames = [op]
    enter, exit_, python_frames = c.enter, c.exit, c.python_frames
    out = {}

    def pair(n):
        for _ in range(n):
            enter(frames)
            exit_()

    def pair_given_depth(n):
        for _ in range(n):
            enter(frames, -1, False, 0)
            exit_()

    def pair_capture(n):
        for _ in range(n):
            enter(frames, -1, True)
            exit_()

    def capture(n):
        for _ in range(n):
            python_frames()

    out["enter/exit"] = best_ns(pair, loops, repeats)
    out["enter/exit, user_depth=0"] = best_ns(pair_given_depth, loops, repeats)
    for d in DEPTHS:
        out[f"enter/exit+capture @{d}"] = at_depth(d, lambda: best_ns(pair_capture, loops, repeats))
        assert at_depth(d, lambda: len(python_frames())) >= d - 1
    for d in DEPTHS:
        out[f"python_frames() @{d}"] = at_depth(d, lambda: best_ns(capture, loops, repeats))

    # 100k nodes: a wide, two-level tree (distinct frames, like a big profile).
    big = cls()
    ops = [big.intern(reference.KIND_OPERATOR, f"op{i}") for i in range(1000)]
    for i in range(100):
        parent = big.child(0, ops[i])
        for f in ops[:999]:
            big.add(big.child(parent, f), reference.METRIC_COUNT, 1)
    assert big.node_count() >= 100_000
    t0 = time.perf_counter_ns()
    snap = big.snapshot()
    out["snapshot 100k nodes (ms)"] = (time.perf_counter_ns() - t0) / 1e6
    assert len(snap["parent"]) == big.node_count()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer loops (smoke run)")
    args = parser.parse_args()
    loops, repeats = (2_000, 3) if args.quick else (20_000, 5)
    ref = measure(reference.Collector, max(loops // 10, 200), repeats)
    nat = measure(_native.Collector, loops, repeats) if _native else {}
    print(f"{'operation':34} {'native':>10} {'reference':>11} {'ratio':>8}")
    for key, r in ref.items():
        unit = "" if "ms" in key else " ns"
        n = nat.get(key)
        cells = f"{n:10.1f}" if n is not None else f"{'-':>10}"
        ratio = f"{r / n:7.1f}x" if n else f"{'-':>8}"
        print(f"{key:34} {cells} {r:11.1f} {ratio}{unit and '   (ns/op)'}")
    if nat:
        ok30 = nat["enter/exit+capture @30"] < 2000
        print(f"target enter/exit+capture @30 < 2000 ns: {'met' if ok30 else 'MISSED'}")


if __name__ == "__main__":
    main()
