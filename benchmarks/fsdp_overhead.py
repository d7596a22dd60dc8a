"""Step-time overhead of a DeepContext window on an FSDP2 training step, against
torch.profiler() measured in the same run.

Two gloo ranks on CPU, one thread each, meet through a file store
(`tests.distributed.spawn`). The model is a stack of blocks, each one
``fully_shard``-ed and the root too (with ``--fsdp 1``, each wrapped in
FSDP1's ``FullyShardedDataParallel`` and the root too), trained with AdamW. Workloads: ``mlp``,
8 blocks of Linear(128, 512) → GELU → Linear(512, 128) on a batch of 64 per
rank; ``launch``, 8 blocks of 4 × (Linear(64, 64) → tanh) on a batch of 8,
where every op is a few microseconds, so a profiler's cost per captured event
(next to FSDP's own Python per block and DTensor's per parameter) is what the
step pays.

Configurations: ``plain`` (no profiler), ``deepcontext window``
(``dc_torch.profile`` with a window over the measured steps, CPU sampler and
system monitor off), ``torch.profiler()`` (``activities=[CPU]``, record_shapes
and with_stack off: its defaults) and, with ``--with-stack``,
``torch.profiler(record_shapes, with_stack)``, which keeps Python call paths as
DeepContext does (its exit alone takes seconds per window, hence optional).
Both ranks run every configuration in the same order, shuffled per round so
that a drift in the machine's speed favours none; each configuration runs a
warm-up step (whose hook opens the window), then the measured steps. A step's
wall time is the slower rank's; its CPU time is the sum over the ranks of each
process's CPU time (all its threads), which other processes on a busy machine
inflate far less than the wall clock. A window's open and close (and
torch.profiler's enter and exit, which processes its events) happen at step
boundaries: they are timed apart and printed per window, not mixed into the steps.

    python benchmarks/fsdp_overhead.py [--workload all|mlp|launch] [--fsdp 2|1] [--steps 8] [--rounds 8] [--with-stack]

Prints, per workload, each configuration's median step time and its ratio to
``plain`` (with the range of per-round ratios, which shows how noisy the machine
was, and the p90 ratio), the same for CPU time, then deepcontext/plain,
torch.profiler/plain and deepcontext/torch.profiler, wall and CPU. Every ratio
comes from this one run. Kineto logs a few lines per torch.profiler window on
stderr (``2>/dev/null`` hides them).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
from torch import nn

PLAIN, DEEPCONTEXT, TORCH, TORCH_STACK = (
    "plain",
    "deepcontext window",
    "torch.profiler()",
    "torch.profiler(record_shapes, with_stack)",
)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128))


def _tiny() -> nn.Module:
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.Tanh())])


#: name -> (block factory, blocks, batch rows per rank, width)
WORKLOADS: dict[str, tuple[Callable[[], nn.Module], int, int, int]] = {
    "mlp": (_mlp, 8, 64, 128),
    "launch": (_tiny, 8, 8, 64),
}

Step = tuple[float, float]  # (wall, CPU) seconds
#: How each ``--fsdp`` shards the blocks, as the report says it.
SHARDED = {2: "FSDP2 (fully_shard)", 1: "FSDP1 (FullyShardedDataParallel)"}


def sharded_model(
    workload: str, rank: int, fsdp: int = 2
) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """The workload's blocks, each sharded and the root too (``fsdp`` 2:
    ``fully_shard``; 1: ``FullyShardedDataParallel`` units), AdamW, and this rank's batch."""
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    block, blocks, rows, width = WORKLOADS[workload]
    torch.manual_seed(0)  # the same model on every rank
    model = nn.Sequential(*[block() for _ in range(blocks)])
    if fsdp == 1:
        cpu = torch.device("cpu")
        for i, b in enumerate(model):
            model[i] = FullyShardedDataParallel(b, device_id=cpu)
        model = FullyShardedDataParallel(model, device_id=cpu)
    else:
        for b in model:
            fully_shard(b)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(1 + rank))
    return model, optimizer, x


def _timed(
    steps: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    hook: Callable[[], None],
    edge: list[float] | None = None,
) -> list[Step]:
    """(wall, CPU) time of each step; with ``edge``, the last step's hook (a
    window's open or close) is timed apart and its wall time appended there."""
    times = []
    for i in range(steps):
        cpu, start = time.process_time(), time.perf_counter()
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        hooked, cpu_hooked = time.perf_counter(), time.process_time()
        hook()
        end, cpu_end = time.perf_counter(), time.process_time()
        if edge is not None and i == steps - 1:
            edge.append(end - hooked)
            end, cpu_end = hooked, cpu_hooked
        times.append((end - start, cpu_end - cpu))
    return times


def run_config(
    name: str, steps: int, rank: int, logdir: str, model: nn.Module, optimizer, x: torch.Tensor
) -> tuple[list[Step], float]:
    """Step times of ``steps`` steps under ``name`` after one warm-up step, and
    the wall seconds its start and end took apart from them (0 for ``plain``)."""
    if name == PLAIN:
        _timed(1, model, optimizer, x, lambda: None)
        return _timed(steps, model, optimizer, x, lambda: None), 0.0
    if name in (TORCH, TORCH_STACK):
        from torch.profiler import ProfilerActivity, profile

        rich = name == TORCH_STACK
        started = time.perf_counter()
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=rich, with_stack=rich)
        prof.__enter__()
        entering = time.perf_counter() - started
        _timed(1, model, optimizer, x, prof.step)
        times = _timed(steps, model, optimizer, x, prof.step)
        exiting = time.perf_counter()
        prof.__exit__(None, None, None)
        return times, entering + time.perf_counter() - exiting
    import dc_torch

    prof = dc_torch.profile(
        logdir=logdir,
        steps={"start": 1, "count": steps},
        rank=rank,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ).start()
    edge: list[float] = []
    try:
        # the warm-up step's hook opens the window, the last measured step's closes it
        _timed(1, model, optimizer, x, prof.step, edge)
        times = _timed(steps, model, optimizer, x, prof.step, edge)
    finally:
        prof.stop()
    return times, sum(edge)


def worker(
    rank: int,
    world: int,
    workloads: list[str],
    configs: list[str],
    steps: int,
    rounds: int,
    fsdp: int,
    init: str,
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    with tempfile.TemporaryDirectory() as logdir:
        for workload in workloads:
            model, optimizer, x = sharded_model(workload, rank, fsdp)
            _timed(3, model, optimizer, x, lambda: None)  # warm up allocator and caches
            samples: dict[str, list[list[Step]]] = {name: [] for name in configs}  # per round
            edges: dict[str, list[float]] = {name: [] for name in configs}
            order = list(configs)
            for r in range(rounds):
                random.Random(r).shuffle(order)  # the same order on every rank
                for name in order:
                    times, edge = run_config(name, steps, rank, logdir, model, optimizer, x)
                    samples[name].append(times)
                    edges[name].append(edge)
            gathered: list = [None] * world
            dist.all_gather_object(gathered, (samples, edges))
            if rank == 0:
                report(workload, world, configs, rounds, gathered, fsdp)
    dist.destroy_process_group()


def report(
    workload: str, world: int, configs: list[str], rounds: int, gathered: list, fsdp: int = 2
) -> None:
    """Print the table from every rank's step times: a step's wall time is the
    slower rank's, its CPU time the sum over ranks."""
    wall: dict[str, list[list[float]]] = {}
    cpu: dict[str, list[list[float]]] = {}
    for name in configs:
        steps = [list(zip(*(g[0][name][r] for g in gathered))) for r in range(rounds)]
        wall[name] = [[max(s[0] for s in step) for step in rnd] for rnd in steps]
        cpu[name] = [[sum(s[1] for s in step) for step in rnd] for rnd in steps]
    _, blocks, rows, _ = WORKLOADS[workload]
    count = sum(len(rnd) for rnd in wall[PLAIN])
    print(
        f"\n{SHARDED[fsdp]} {workload}: {blocks} blocks + root, AdamW, batch {rows}/rank, "
        f"{world} gloo ranks × 1 thread; {count} steps per configuration in {rounds} rounds"
    )
    print(
        f"{'configuration':42s} {'wall ms':>8s} {'ratio':>6s} {'per round':>12s} {'p90':>6s} "
        f"{'cpu ms':>7s} {'ratio':>6s} {'per round':>12s}"
    )
    ratio: dict[tuple[str, str], float] = {}
    for name in configs:
        cells = []
        for kind, table in (("wall", wall), ("cpu", cpu)):
            flat = [t for rnd in table[name] for t in rnd]
            base = [t for rnd in table[PLAIN] for t in rnd]
            ratio[kind, name] = statistics.median(flat) / statistics.median(base)
            per_round = [
                statistics.median(m) / statistics.median(p)
                for m, p in zip(table[name], table[PLAIN])
            ]
            spread = f"{min(per_round):.3f}-{max(per_round):.3f}"
            cells.append(
                f"{statistics.median(flat) * 1e3:8.2f} {ratio[kind, name]:6.3f} {spread:>12s}"
            )
            if kind == "wall":
                cells.append(f"{_p90(flat) / _p90(base):6.3f}")
        print(f"{name:42s} {' '.join(cells)}")
    base_ms = statistics.median(t for rnd in wall[PLAIN] for t in rnd) * 1e3
    for name in configs[1:]:
        ms = statistics.median(max(g[1][name][r] for g in gathered) for r in range(rounds)) * 1e3
        what = "window open + close" if name == DEEPCONTEXT else "enter + exit"
        print(f"{name}: {what} {ms:.1f} ms per window ({ms / base_ms:.1f} steps)")
    for kind in ("wall", "cpu"):
        dc, tp = ratio[kind, DEEPCONTEXT], ratio[kind, TORCH]
        line = (
            f"{kind:4s}: deepcontext/plain {dc:.3f}, torch.profiler/plain {tp:.3f}, "
            f"deepcontext/torch.profiler {dc / tp:.3f} ({'ahead' if dc <= tp else 'behind'})"
        )
        if TORCH_STACK in configs:
            line += f", deepcontext/torch.profiler(with_stack) {dc / ratio[kind, TORCH_STACK]:.3f}"
        print(line)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["all", *WORKLOADS], default="all")
    parser.add_argument(
        "--steps", type=int, default=8, help="measured steps per configuration and round"
    )
    parser.add_argument(
        "--rounds", type=int, default=8, help="interleaved rounds over all configurations"
    )
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--fsdp", type=int, choices=[2, 1], default=2, help="FSDP2 (fully_shard) or FSDP1 units"
    )
    parser.add_argument(
        "--with-stack", action="store_true", help="add torch.profiler(record_shapes, with_stack)"
    )
    args = parser.parse_args(argv)
    from tests.distributed.spawn import spawn

    workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    configs = [PLAIN, DEEPCONTEXT, TORCH] + ([TORCH_STACK] if args.with_stack else [])
    spawn(worker, args.ranks, workloads, configs, args.steps, args.rounds, args.fsdp)


if __name__ == "__main__":
    main()
