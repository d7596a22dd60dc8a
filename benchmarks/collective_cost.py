"""What a window adds to one collective call, and how true its ``comm_time_ns`` is.

One gloo rank in this process, one thread; an all-reduce of 100 floats,
called three ways: ``sync`` (``dist.all_reduce(t)``, which waits at once),
``async`` (``async_op=True``, then ``wait()`` at once) and ``async+compute``
(``async_op=True``, 200 µs of Python, then ``wait()``: the collective
completes while the step computes, as a prefetch does). Configurations: no
profiler; a DeepContext window whose collectives' completion the native
extension clocks (``native clock``); the same window with that clock
unavailable, so a Python callback on the work's future clocks it (``python
callback``, the path without the extension); and ``torch.profiler()``.
Rounds interleave the configurations; each prints its median µs a call over
the unprofiled call of the same round and the ratio to torch.profiler's, and,
for DeepContext, ``comm_time_ns`` per call (launch to completion): the
collective itself takes tens of µs, so a larger figure says when the clock
was read, not when the work completed.

    python benchmarks/collective_cost.py [--calls 400] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

import dc_torch
from dc_core.store.logdir import read_profile
from dc_torch import completion

CONFIGS = ("unprofiled", "native clock", "python callback", "torch.profiler")
WAYS = ("sync", "async", "async+compute")
COMPUTE_NS = 200_000


def _spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def _call(way: str, t: torch.Tensor) -> None:
    if way == "sync":
        dist.all_reduce(t)
        return
    work = dist.all_reduce(t, async_op=True)
    if way == "async+compute":
        _spin(COMPUTE_NS)
    work.wait()


@contextlib.contextmanager
def _no_native_clock() -> Iterator[None]:
    """The window as without the extension's clock: its collectives fall back
    to a Python callback (the clock is made once per hooks object, at install)."""
    made = completion.CompletionClock.__init__

    def refuse(self, extension) -> None:
        raise RuntimeError("benchmark: no native clock")

    completion.CompletionClock.__init__ = refuse
    try:
        yield
    finally:
        completion.CompletionClock.__init__ = made


def _timed(name: str, logdir: str, run: Callable[[], int]) -> tuple[float, float]:
    """(ns a call, comm_time_ns a call or nan) of ``run`` under configuration ``name``."""
    if name == "unprofiled":
        return run(), float("nan")
    if name == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]):
            return run(), float("nan")
    fallback = _no_native_clock() if name == "python callback" else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(dir=logdir) as out, fallback:
        with dc_torch.profile(
            logdir=out, steps={"start": 0, "count": 1}, cpu_sampling_hz=0, system_interval_ms=0
        ) as prof:
            per_call = run()
        profile = read_profile(prof.written[0])
        assert profile.env.get("capture", "").startswith("native"), profile.env.get("capture")
        tree = profile.tree
        nodes = tree.find_all(lambda f: f.name == "c10d::allreduce_")
        calls = sum(tree.value(n, "count") for n in nodes)
        comm = sum(tree.value(n, "comm_time_ns") for n in nodes)
        return per_call, comm / max(calls, 1)


def measure(calls: int, rounds: int) -> dict[tuple[str, str], tuple[float, float]]:
    t = torch.ones(100)
    cost: dict[tuple[str, str], list[float]] = {}
    comm: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as logdir:
        for _ in range(rounds):
            for way in WAYS:

                def run(way: str = way) -> int:
                    for _ in range(calls // 10):
                        _call(way, t)  # warm
                    start = time.perf_counter_ns()
                    for _ in range(calls):
                        _call(way, t)
                    return (time.perf_counter_ns() - start) // calls

                per_call = {name: _timed(name, logdir, run) for name in CONFIGS}
                for name in CONFIGS[1:]:
                    cost.setdefault((way, name), []).append(
                        per_call[name][0] - per_call["unprofiled"][0]
                    )
                    comm.setdefault((way, name), []).append(per_call[name][1])
    return {key: (statistics.median(cost[key]), statistics.median(comm[key])) for key in cost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group(
            "gloo", store=dist.FileStore(os.path.join(store, "store"), 1), rank=0, world_size=1
        )
        try:
            results = measure(args.calls, args.rounds)
        finally:
            dist.destroy_process_group()
    print(f"one gloo rank, all_reduce of 100 floats; median of {args.rounds} rounds")
    print(
        f"{'call':<15}{'configuration':<17}{'µs added a call':>17}{'/ torch.profiler':>18}"
        f"{'comm_time µs a call':>21}"
    )
    for way in WAYS:
        peer = results[way, "torch.profiler"][0]
        for name in CONFIGS[1:]:
            added, comm = results[way, name]
            ratio = f"{added / peer:.2f}" if peer > 0 else "-"
            shown = "-" if comm != comm else f"{comm / 1e3:.1f}"
            print(f"{way:<15}{name:<17}{added / 1e3:>17.1f}{ratio:>18}{shown:>21}")


if __name__ == "__main__":
    main()
