"""Step-time overhead of DeepContext on a small GPT training step on CPU.

Workload (issue 3): 4 blocks, d=128, 4 heads, batch 8×64, vocab 512, AdamW,
one thread. Every configuration runs in the same process, interleaved in
rounds so that machine noise hits all of them alike; every ratio printed
comes from this one run: median step time over the unprofiled median, and
the range of the per-round ratios (each round's median over that round's
unprofiled median), which shows how noisy the machine was.

    python benchmarks/torch_overhead.py [--steps 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Callable

import torch

from dc_core.config import StepRange
from dc_torch import Profiler
from dc_torch.demo import make_workload, train_step

TARGETS = {"outside a window": 1.02, "lightweight window": 1.15, "comprehensive window": 1.6}


def _timed(steps: int, batches: list, model, optimizer, step_hook: Callable[[], None]) -> list[float]:
    times = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        start = time.perf_counter()
        train_step(model, optimizer, x, y)
        step_hook()
        times.append(time.perf_counter() - start)
    return times


def run_config(name: str, steps: int, logdir: str, batches: list, model, optimizer) -> list[float]:
    """Step times of ``steps`` steps under configuration ``name`` (after one warm-up step)."""
    if name == "unprofiled":
        _timed(1, batches, model, optimizer, lambda: None)
        return _timed(steps, batches, model, optimizer, lambda: None)
    if name.startswith("torch.profiler"):
        from torch.profiler import ProfilerActivity, profile

        rich = "with_stack" in name
        with profile(activities=[ProfilerActivity.CPU], record_shapes=rich, with_stack=rich) as prof:
            _timed(1, batches, model, optimizer, prof.step)
            return _timed(steps, batches, model, optimizer, prof.step)
    mode = "comprehensive" if name.startswith("comprehensive") else "lightweight"
    window = StepRange(start=10**9, count=1) if name == "outside a window" else StepRange(start=1, count=steps)
    profiler = Profiler(logdir=logdir, steps=window, mode=mode)
    profiler.start()
    try:
        _timed(1, batches, model, optimizer, profiler.step)
        return _timed(steps, batches, model, optimizer, profiler.step)
    finally:
        profiler.stop()


CONFIGS = (
    "unprofiled",
    "outside a window",
    "lightweight window",
    "comprehensive window",
    "torch.profiler(record_shapes, with_stack)",
    "torch.profiler() plain",
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="measured steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all configurations")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, optimizer, batch = make_workload()
    batches = [batch() for _ in range(4)]
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    rounds: dict[str, list[float]] = {name: [] for name in CONFIGS}  # per-round medians
    with tempfile.TemporaryDirectory() as logdir:
        _timed(3, batches, model, optimizer, lambda: None)  # warm up allocator and caches
        for _ in range(args.rounds):
            for name in CONFIGS:
                times = run_config(name, args.steps, logdir, batches, model, optimizer)
                samples[name] += times
                rounds[name].append(statistics.median(times))
    base = statistics.median(samples["unprofiled"])
    ratios = {}
    print(f"GPT step on CPU, 1 thread: {len(samples['unprofiled'])} steps per configuration")
    print(f"{'configuration':45s} {'median ms':>10s} {'ratio':>7s} {'per round':>13s} {'target':>7s}")
    for name in CONFIGS:
        median = statistics.median(samples[name])
        ratios[name] = median / base
        per_round = [m / u for m, u in zip(rounds[name], rounds["unprofiled"])]
        spread = f"{min(per_round):.3f}-{max(per_round):.3f}"
        target = TARGETS.get(name)
        mark = "" if target is None else (f"≤{target:.2f}" + (" ok" if ratios[name] <= target else " MISS"))
        print(f"{name:45s} {median * 1e3:10.2f} {ratios[name]:7.3f} {spread:>13s} {mark:>7s}")
    return ratios


if __name__ == "__main__":
    main()
