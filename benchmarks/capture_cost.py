"""Nanoseconds per captured operator (enter + exit, timing and the metric update).

A launch-bound loop of tiny ops (``torch.neg`` on a 4-element tensor, about a
microsecond each on a CPU) runs at Python stack depth 10, 30 and 100 under:
no profiler; DeepContext's native capture taking op inputs and outputs (FLOPs
and alloc_bytes, as a comprehensive window does), inputs only (FLOPs: a
lightweight window's default) and neither (so the "shapes" cost shows apart);
the same with memory by context (each ``torch.neg`` allocates its output and
frees it: two allocator reports per op, so half the difference to "no
shapes" is the memory path's cost per report); DeepContext's Python capture
path; and ``torch.profiler.profile()``. Each configuration's cost per op is its time
per op minus the unprofiled time per op measured in the same round; rounds
interleave the configurations so machine noise hits all alike, and the median
over rounds is printed with the ratio to torch.profiler's cost.

    python benchmarks/capture_cost.py [--ops 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch

from dc_core.record.config import StepRange
from dc_torch import Profiler

CONFIGS = (
    "unprofiled",
    "deepcontext native",
    "deepcontext native, flops only",
    "deepcontext native, no shapes",
    "deepcontext native, memory",
    "deepcontext python",
    "torch.profiler()",
)
SHAPES = {
    "deepcontext native": {"flops", "alloc_bytes"},
    "deepcontext native, flops only": {"flops"},
    "deepcontext native, no shapes": set(),
    "deepcontext native, memory": set(),
}
TARGET_NS_AT_30 = 300


def _at_depth(depth: int, fn: Any) -> float:
    if depth <= 1:
        return fn()
    return _at_depth(depth - 1, fn)


def _loop(x: torch.Tensor, ops: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(ops):
        torch.neg(x)
    return (time.perf_counter_ns() - start) / ops


@contextlib.contextmanager
def _profiled(name: str, logdir: str) -> Iterator[None]:
    if name == "unprofiled":
        yield
    elif name.startswith("deepcontext"):
        capture = name.split()[1].rstrip(",")
        prof = Profiler(
            logdir=logdir,
            steps=StepRange(start=0, count=1),
            capture=capture,
            cpu_sampling_hz=0,
            system_interval_ms=0,
            memory=name.endswith("memory"),
        )
        if name in SHAPES:  # read when the window opens, in start()
            prof.session.adapter.shapes = frozenset(SHAPES[name])
        prof.start()
        prof.session.step_begin(0)
        try:
            yield
        finally:
            prof.session.step_end(0)
            prof.stop()
            assert prof.session.adapter.capture == capture, prof.session.adapter.capture_note
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            yield


def measure(depth: int, ops: int, rounds: int) -> dict[str, float]:
    """Median ns per op of each configuration minus the unprofiled one, per round."""
    x = torch.randn(4)
    costs: dict[str, list[float]] = {name: [] for name in CONFIGS[1:]}
    with tempfile.TemporaryDirectory() as logdir:
        for _ in range(rounds):
            per_op = {}
            for name in CONFIGS:
                with _profiled(name, logdir):
                    _at_depth(depth, lambda: _loop(x, ops // 10))  # warm the caches
                    per_op[name] = _at_depth(depth, lambda: _loop(x, ops))
            for name in CONFIGS[1:]:
                costs[name].append(per_op[name] - per_op["unprofiled"])
    return {name: statistics.median(values) for name, values in costs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"ns per captured op (torch.neg on 4 floats; median of {args.rounds} rounds, minus unprofiled)"
    )
    print(
        f"{'depth':>5}  "
        + "  ".join(f"{name.replace('deepcontext ', ''):>18}" for name in CONFIGS[1:])
        + "  native/torch.profiler"
    )
    memory = []
    for depth in (10, 30, 100):
        cost = measure(depth, args.ops, args.rounds)
        memory.append(
            (cost["deepcontext native, memory"] - cost["deepcontext native, no shapes"]) / 2
        )
        ratio = cost["deepcontext native"] / cost["torch.profiler()"]
        print(
            f"{depth:>5}  "
            + "  ".join(f"{cost[name]:>18.0f}" for name in CONFIGS[1:])
            + f"  {ratio:>21.2f}"
        )
    print(
        "memory path: "
        + ", ".join(f"{ns:.0f}" for ns in memory)
        + " ns per allocator report (alloc or free) at depth 10, 30, 100"
    )
    print(
        f"target: <= {TARGET_NS_AT_30} ns at depth 30 for the capture itself ('no shapes': a lightweight "
        "window's default); the shape columns add what boxing op arguments costs"
    )


if __name__ == "__main__":
    main()
