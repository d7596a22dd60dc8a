"""What the CPU sampler costs: training step times with and without it, and a tick.

Workload: the tiny GPT of ``dc_torch.demo`` (AdamW, one torch thread). Four
configurations run in the same process, interleaved in rounds (order rotated)
so machine noise hits them alike: unprofiled, a lightweight window with the
sampler off, the same window with the default 100 Hz sampler, and with 1000 Hz
(ten times the ticks: what a tick costs the training thread shows there).
Printed per configuration: step-time p50 and p90, their ratios over
unprofiled and the range of per-round p50 ratios (the machine's noise); then
the sampler's own share: each sampled window over the window without it.
Target (issue 10): p50 and p90 inside a window within 10% of unprofiled.

Then the cost of naming a native frame in comprehensive mode: the sampler's
symbol index against dladdr (which it used before, and still asks where the
index cannot tell), µs per address over the same addresses of
libtorch_cpu's code.

Then the cost of one tick, from the sampler thread's own CPU time
(``/proc/self/task/<tid>/schedstat``) over a second at 1000 Hz, with N threads
bound to the collector, idle in a scope (one CPU-clock read each) and with the
main thread busy in one (a tree update per tick).

    python benchmarks/sampler.py [--steps 25] [--rounds 4] [--lookups-only]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import threading
import time

import torch
from torch_overhead import (  # the same timed loop (GPT step) as the overhead benchmark
    _timed as timed,
)
from torch_overhead import profiled

from dc_core import _native
from dc_core.record.config import StepRange
from dc_torch import Profiler
from dc_torch.demo import make_workload

CONFIGS = ("unprofiled", "window, sampler off", "window, 100 Hz sampler", "window, 1000 Hz sampler")
TARGET = 1.10


def run_config(name: str, steps: int, logdir: str, batches: list, model, optimizer) -> list[float]:
    """Step times of ``steps`` steps under ``name``, after one warm-up step."""
    if name == "unprofiled":
        timed(1, batches, model, optimizer, lambda: None)
        return timed(steps, batches, model, optimizer, lambda: None)
    hz = float(name.split()[1]) if name.endswith("Hz sampler") else 0.0
    return profiled(
        Profiler(logdir=logdir, steps=StepRange(start=1, count=steps), cpu_sampling_hz=hz),
        steps,
        batches,
        model,
        optimizer,
    )


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def step_times(steps: int, rounds: int) -> None:
    torch.set_num_threads(1)
    model, optimizer, batch = make_workload()
    batches = [batch() for _ in range(4)]
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    per_round: dict[str, list[float]] = {name: [] for name in CONFIGS}  # each round's p50
    with tempfile.TemporaryDirectory() as logdir:
        timed(3, batches, model, optimizer, lambda: None)  # warm up allocator and caches
        for r in range(rounds):
            # rotated: no order bias
            for name in CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]:
                t = run_config(name, steps, logdir, batches, model, optimizer)
                times[name] += t
                per_round[name].append(statistics.median(t))
    stats = {name: (percentile(t, 50), percentile(t, 90)) for name, t in times.items()}
    base50, base90 = stats["unprofiled"]
    print(
        f"GPT step on CPU, 1 torch thread, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}: "
        f"{len(times['unprofiled'])} steps per configuration"
    )
    print(
        f"{'configuration':26s} {'p50 ms':>8s} {'p90 ms':>8s} {'p50 ×':>7s} {'p90 ×':>7s} {'p50 × per round':>16s}"
    )
    for name in CONFIGS:
        p50, p90 = stats[name]
        rounds_x = [m / u for m, u in zip(per_round[name], per_round["unprofiled"])]
        spread = f"{min(rounds_x):.3f}-{max(rounds_x):.3f}"
        print(
            f"{name:26s} {p50 * 1e3:8.2f} {p90 * 1e3:8.2f} {p50 / base50:7.3f} {p90 / base90:7.3f} {spread:>16s}"
        )
    off50, off90 = stats["window, sampler off"]
    for name in CONFIGS[2:]:
        on50, on90 = stats[name]
        print(
            f"{name.split(', ')[1]} alone (window with it / without): p50 ×{on50 / off50:.3f}, p90 ×{on90 / off90:.3f}"
        )
    on50, on90 = stats["window, 100 Hz sampler"]
    ok = on50 / base50 <= TARGET and on90 / base90 <= TARGET
    print(
        f"window with the 100 Hz sampler vs unprofiled, target ≤{TARGET:.2f}: {'ok' if ok else 'MISS'}"
    )


def thread_cpu_ns(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def tick_cost(threads: int, busy: bool, hz: float = 1000.0, seconds: float = 1.0) -> float:
    """ns of sampler-thread CPU per tick with ``threads`` idle threads bound to a collector."""
    c = _native.Collector()
    phase = c.intern(_native.KIND_PHASE, "dataloader")
    ready, release = threading.Barrier(threads + 1), threading.Event()

    def idle():
        c.enter([phase], 0, False, 0)
        ready.wait()
        release.wait()
        c.exit()

    pool = [threading.Thread(target=idle) for _ in range(threads)]
    for t in pool:
        t.start()
    ready.wait()
    before = set(os.listdir("/proc/self/task"))
    c.start_sampler(hz)
    (tid,) = {int(t) for t in set(os.listdir("/proc/self/task")) - before}
    cpu0, t0 = thread_cpu_ns(tid), time.monotonic()
    if busy:
        c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        c.exit()
    else:
        time.sleep(seconds)
    cpu1, t1 = thread_cpu_ns(tid), time.monotonic()
    c.stop_sampler()
    release.set()
    for t in pool:
        t.join()
    ticks = (t1 - t0) * hz - c.snapshot()["drops"]["samples"]
    return (cpu1 - cpu0) / max(ticks, 1.0)


def lookup_cost(addresses: int = 400) -> tuple[float, float, float]:
    """(ms to index libtorch_cpu, then µs per address for the index and for
    dladdr) over ``addresses`` addresses spread over its code."""
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    info = ctypes.create_string_buffer(64)
    lo, hi = next(
        (int(a, 16), int(b, 16))
        for line in open("/proc/self/maps")
        for (a, b), perms, path in [(line.split()[0].split("-"), line.split()[1], line.split()[-1])]
        if "libtorch_cpu" in path and "x" in perms
    )
    step = (hi - lo) // addresses
    spread = [lo + i * step - 5 for i in range(1, addresses + 1)]
    start = time.perf_counter()
    _native.symbol_at(lo)  # reads the library's symbols
    t0 = time.perf_counter()
    for a in spread:
        _native.symbol_at(a)
    t1 = time.perf_counter()
    for a in spread:
        libc.dladdr(a, info)
    t2 = time.perf_counter()
    return (t0 - start) * 1e3, (t1 - t0) / addresses * 1e6, (t2 - t1) / addresses * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=25, help="measured steps per configuration and round"
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="interleaved rounds over the configurations"
    )
    parser.add_argument("--lookups-only", action="store_true", help="only the symbol lookups")
    args = parser.parse_args(argv)
    if not args.lookups_only:
        step_times(args.steps, args.rounds)
    built, ours, theirs = lookup_cost()
    print(
        f"native frame names in libtorch_cpu: index read in {built:.1f} ms once, then µs per "
        f"address: index {ours:.2f}, dladdr {theirs:.1f} (×{theirs / ours:.0f})"
    )
    if args.lookups_only:
        return
    print("sampler tick, sampler-thread CPU per tick (wake-up included), 1000 Hz:")
    for threads in (1, 16, 64):
        idle_ns, busy_ns = tick_cost(threads, False), tick_cost(threads, True)
        print(
            f"  {threads:3d} idle threads bound: {idle_ns / 1e3:6.1f} µs; "
            f"+ main thread busy in a scope: {busy_ns / 1e3:6.1f} µs"
        )


if __name__ == "__main__":
    main()
