"""Step-time overhead of DeepContext on a small GPT training step on CPU, and on
a launch-bound loop of tiny ops.

Workloads: ``gpt`` (issue 3): 4 blocks, d=128, 4 heads, batch 8×64, vocab 512,
AdamW, one thread. ``launch`` (issue 10): 24 blocks of LayerNorm → Linear(16)
→ tanh on a batch of 4, SGD: every op takes about a microsecond, as eager ops
do on a GPU when kernels are short, so the profiler's cost per op is what the
step pays. Every configuration runs in the same process, interleaved in
rounds so that machine noise hits all of them alike; every ratio printed
comes from this one run: median step time over the unprofiled median, and
the range of the per-round ratios (each round's median over that round's
unprofiled median), which shows how noisy the machine was.

    python benchmarks/torch_overhead.py [--workload gpt|launch] [--steps 12] [--rounds 3]

Besides the median ratio, the p90 of step times over the unprofiled p90. A
window's open and close happen at step boundaries (the step call before its
first step, the one after its last): they are timed apart and printed per
window, not mixed into the steps the window times. The
last row registers a global RecordFunction callback that does nothing: the
cost torch itself adds to every op once any callback listens, which no
profiler on this path (DeepContext's or torch.profiler) can go below.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from dc_core.record.config import StepRange
from dc_torch import Profiler
from dc_torch.demo import make_workload, train_step

#: The GPT step's targets; the launch-bound loop's is torch.profiler()'s ratio (the last line).
#: Memory by context (issue 30) is held to the lightweight window's ratio + 0.03.
TARGETS = {"outside a window": 1.01, "lightweight window": 1.05, "comprehensive window": 1.3}


def launch_bound_workload(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable]:
    """24 × (LayerNorm → Linear(16) → tanh) on a batch of 4, SGD: tiny ops only."""
    torch.manual_seed(seed)
    blocks = [
        torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 16), torch.nn.Tanh())
        for _ in range(24)
    ]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(16, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(4, 16), torch.randint(0, 8, (4,))

    return model, optimizer, next_batch


def launch_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> float:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


STEP = {"gpt": train_step, "launch": launch_step}
WORKLOADS = {"gpt": make_workload, "launch": launch_bound_workload}


_step = train_step  # the workload's step function (main sets it)


#: Seconds each window's open and close took, per configuration (main fills it).
_edges: dict[str, list[float]] = {}
#: Where `_timed` appends each step's process CPU time (all threads), when set.
_cpu_sink: list[float] | None = None


def _timed(
    steps: int,
    batches: list,
    model,
    optimizer,
    step_hook: Callable[[], None],
    edge: list[float] | None = None,
) -> list[float]:
    """Step times; with ``edge``, the last step's hook (a window's close) is
    timed apart and appended there."""
    times = []
    for i in range(steps):
        x, y = batches[i % len(batches)]
        cpu, start = time.process_time(), time.perf_counter()
        _step(model, optimizer, x, y)
        hook, cpu_hook = time.perf_counter(), time.process_time()
        step_hook()
        end, cpu_end = time.perf_counter(), time.process_time()
        if edge is not None and i == steps - 1:
            edge.append(end - hook)
            end, cpu_end = hook, cpu_hook
        times.append(end - start)
        if _cpu_sink is not None:
            _cpu_sink.append(cpu_end - cpu)
    return times


def run_config(name: str, steps: int, logdir: str, batches: list, model, optimizer) -> list[float]:
    """Step times of ``steps`` steps under configuration ``name`` (after one warm-up step)."""
    if name == "unprofiled":
        _timed(1, batches, model, optimizer, lambda: None)
        return _timed(steps, batches, model, optimizer, lambda: None)
    if name.startswith("RecordFunction floor"):
        from dc_torch import native

        extension, why = native.load()
        if extension is None:
            raise SystemExit(f"the native capture extension is needed for the floor row: {why}")
        extension.bare(True)
        try:
            _timed(1, batches, model, optimizer, lambda: None)
            return _timed(steps, batches, model, optimizer, lambda: None)
        finally:
            extension.bare(False)
    if name.startswith("torch.profiler"):
        from torch.profiler import ProfilerActivity, profile

        rich = "with_stack" in name
        with profile(
            activities=[ProfilerActivity.CPU], record_shapes=rich, with_stack=rich
        ) as prof:
            _timed(1, batches, model, optimizer, prof.step)
            return _timed(steps, batches, model, optimizer, prof.step)
    mode = "comprehensive" if name.startswith("comprehensive") else "lightweight"
    window = (
        StepRange(start=10**9, count=1)
        if name == "outside a window"
        else StepRange(start=1, count=steps)
    )
    capture = "python" if "python capture" in name else "auto"
    memory = "with memory" in name
    edges = None if name == "outside a window" else _edges.setdefault(name, [])
    return profiled(
        Profiler(logdir=logdir, steps=window, mode=mode, capture=capture, memory=memory),
        steps,
        batches,
        model,
        optimizer,
        edges,
    )


def profiled(
    profiler: Profiler,
    steps: int,
    batches: list,
    model,
    optimizer,
    edges: list[float] | None = None,
) -> list[float]:
    """Step times of ``steps`` steps under ``profiler``, after one warm-up step
    (whose hook opens a window of steps 1..``steps``); with ``edges``, the
    window's open and close time is appended there, apart from the steps."""
    opened: list[float] = []
    profiler.start()
    try:
        _timed(1, batches, model, optimizer, profiler.step, opened)
        closed: list[float] = []
        times = _timed(steps, batches, model, optimizer, profiler.step, closed)
        if edges is not None:
            edges.append(opened[0] + closed[0])
        return times
    finally:
        profiler.stop()


CONFIGS = (
    "unprofiled",
    "outside a window",
    "lightweight window",
    "lightweight window with memory",
    "lightweight window, python capture",
    "comprehensive window",
    "torch.profiler(record_shapes, with_stack)",
    "torch.profiler() plain",
    "RecordFunction floor (a no-op callback)",
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=12, help="measured steps per configuration and round"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds over all configurations"
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="gpt")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    global _step
    _step = STEP[args.workload]
    model, optimizer, batch = WORKLOADS[args.workload]()
    batches = [batch() for _ in range(4)]
    samples: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    rounds: dict[str, list[float]] = {name: [] for name in CONFIGS}  # per-round medians
    global _cpu_sink
    with tempfile.TemporaryDirectory() as logdir:
        _timed(3, batches, model, optimizer, lambda: None)  # warm up allocator and caches
        order = list(CONFIGS)
        for r in range(args.rounds):
            # a drift in the machine's speed favours no configuration
            random.Random(r).shuffle(order)
            for name in order:
                _cpu_sink = []
                times = run_config(name, args.steps, logdir, batches, model, optimizer)
                samples[name] += times
                cpu[name] += _cpu_sink[-len(times) :]  # the measured steps, not the warm-up
                rounds[name].append(statistics.median(times))
        _cpu_sink = None
    base = statistics.median(samples["unprofiled"])
    base_p90 = _p90(samples["unprofiled"])
    base_cpu = statistics.median(cpu["unprofiled"])
    ratios = {}
    print(
        f"{args.workload} step on CPU, 1 thread: {len(samples['unprofiled'])} steps per configuration"
    )
    print(
        "ratio: median wall-clock step over the unprofiled one; cpu: the same of the process's CPU time "
        "(all its threads), which other processes on the machine do not inflate"
    )
    print(
        f"{'configuration':45s} {'median ms':>10s} {'ratio':>7s} {'per round':>13s} {'p90 ratio':>9s} "
        f"{'cpu':>6s} {'target':>7s}"
    )
    for name in CONFIGS:
        median = statistics.median(samples[name])
        ratios[name] = median / base
        per_round = [m / u for m, u in zip(rounds[name], rounds["unprofiled"])]
        spread = f"{min(per_round):.3f}-{max(per_round):.3f}"
        # the launch loop's target is the peer
        target = TARGETS.get(name) if args.workload == "gpt" else None
        mark = (
            ""
            if target is None
            else (f"≤{target:.2f}" + (" ok" if ratios[name] <= target else " MISS"))
        )
        p90 = _p90(samples[name]) / base_p90
        cpu_ratio = statistics.median(cpu[name]) / base_cpu
        print(
            f"{name:45s} {median * 1e3:10.2f} {ratios[name]:7.3f} {spread:>13s} {p90:9.3f} {cpu_ratio:6.3f} "
            f"{mark:>7s}"
        )
    for name, edges in _edges.items():
        ms = statistics.median(edges) * 1e3
        print(
            f"{name}: window open + close {ms:.2f} ms per window ({ms / (base * 1e3):.1%} of one step)"
        )
    memory = ratios["lightweight window with memory"] - ratios["lightweight window"]
    print(
        f"memory by context: lightweight with memory - without = {memory:+.3f} "
        f"(budget +0.03: {'ok' if memory <= 0.03 else 'MISS'})"
    )
    light, plain = ratios["lightweight window"], ratios["torch.profiler() plain"]
    print(
        f"lightweight window / torch.profiler(): {light / plain:.3f} ({'ahead' if light <= plain else 'behind'})"
    )
    return ratios


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


if __name__ == "__main__":
    main()
