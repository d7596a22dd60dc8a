"""Profile size and memory for a 4-step vs a 40-step window on the GPT workload,
and for a 10-step vs a 10,000-step window with memory by context (``memory=True``)
on a tiny MLP step.

DeepContext aggregates on the tree while it collects, so a longer window
should cost about the same file size and collector memory; a
``torch.profiler`` trace grows with the number of events. Both are printed.
Collector memory is read as the process RSS growth across the window (the
workload's own memory is warmed up first).

    python benchmarks/torch_memory.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from dc_core.record.config import StepRange
from dc_torch import Profiler
from dc_torch.demo import make_workload, train_step


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def deepcontext_window(steps: int, logdir: str, model, optimizer, batch) -> tuple[int, int]:
    """(file bytes, RSS growth bytes) of one window of ``steps`` steps."""
    profiler = Profiler(logdir=logdir, run=f"w{steps}", steps=StepRange(start=1, count=steps))
    profiler.start()
    x, y = batch()
    train_step(model, optimizer, x, y)
    profiler.step()
    before = peak = _rss()
    for _ in range(steps):
        x, y = batch()
        train_step(model, optimizer, x, y)
        peak = max(peak, _rss())
        profiler.step()
    profiler.stop()
    (path,) = profiler.written
    return path.stat().st_size, peak - before


def memory_window(steps: int, logdir: str) -> tuple[int, int, int]:
    """(memory's bytes in the file, RSS growth bytes, timeline points) of one ``memory=True`` window
    of ``steps`` steps of a tiny MLP: its live map and timeline stay bounded."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        model(torch.randn(16, 32)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    profiler = Profiler(
        logdir=logdir,
        run=f"m{steps}",
        steps=StepRange(start=1, count=steps),
        memory=True,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    profiler.start()
    step()
    profiler.step()
    before = peak = _rss()
    for i in range(steps):
        step()
        if i % 100 == 0:
            peak = max(peak, _rss())
        profiler.step()
    peak = max(peak, _rss())
    profiler.stop()
    (path,) = profiler.written
    from dc_core.model.kinds import base_metric
    from dc_core.record.memory import MEMORY_METRIC_NAMES
    from dc_core.store import profile_pb2

    message = profile_pb2.Profile.FromString(path.read_bytes())
    families = {base_metric(name) for name in MEMORY_METRIC_NAMES}
    # memory's own part of the file: the device facts and the memory metrics' columns
    # (the rest grows with the steps: one step time per step)
    part = sum(m.ByteSize() for m in message.memory) + sum(
        m.ByteSize() for m in message.tree.metrics if base_metric(m.name) in families
    )
    return part, peak - before, len(message.memory[0].timeline_bytes)


def torch_profiler_trace(steps: int, logdir: str, model, optimizer, batch) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(steps):
            x, y = batch()
            train_step(model, optimizer, x, y)
            prof.step()
    path = Path(logdir) / f"trace-{steps}.json"
    prof.export_chrome_trace(str(path))
    return path.stat().st_size


def main() -> dict[str, float]:
    torch.set_num_threads(1)
    model, optimizer, batch = make_workload()
    for _ in range(3):  # warm the allocator and the optimizer state
        x, y = batch()
        train_step(model, optimizer, x, y)
    with tempfile.TemporaryDirectory() as logdir:
        dc = {n: deepcontext_window(n, logdir, model, optimizer, batch) for n in (4, 40)}
        tp = {n: torch_profiler_trace(n, logdir, model, optimizer, batch) for n in (4, 40)}
    file_ratio = dc[40][0] / dc[4][0]
    print(f"{'':32s} {'4 steps':>12s} {'40 steps':>12s} {'ratio':>7s}")
    print(
        f"{'DeepContext profile file':32s} {dc[4][0]:12,d} {dc[40][0]:12,d} {file_ratio:7.2f}  (target ≤1.30)"
    )
    print(f"{'DeepContext RSS growth in window':32s} {dc[4][1]:12,d} {dc[40][1]:12,d}")
    print(f"{'torch.profiler trace (stack)':32s} {tp[4]:12,d} {tp[40]:12,d} {tp[40] / tp[4]:7.2f}")
    with tempfile.TemporaryDirectory() as logdir:
        mem = {n: memory_window(n, logdir) for n in (10, 10_000)}
    memory_ratio = mem[10_000][0] / mem[10][0]
    print(f"{'':32s} {'10 steps':>12s} {'10000 steps':>12s} {'ratio':>7s}")
    print(
        f"{'memory=True: memory in the file':32s} {mem[10][0]:12,d} {mem[10_000][0]:12,d} "
        f"{memory_ratio:7.2f}  (target ≤1.30)"
    )
    print(f"{'memory=True RSS growth in window':32s} {mem[10][1]:12,d} {mem[10_000][1]:12,d}")
    print(f"{'memory=True timeline points':32s} {mem[10][2]:12,d} {mem[10_000][2]:12,d}")
    return {"file_ratio": file_ratio, "trace_ratio": tp[40] / tp[4], "memory_ratio": memory_ratio}


if __name__ == "__main__":
    main()
