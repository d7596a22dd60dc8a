"""Run by test_fsdp1.py: a planted exposed all-gather under FSDP1 (the
``FullyShardedDataParallel`` wrapper) on 2 CPU processes (gloo). Block "0"
and "2" are small, block "1" is huge (2 x Linear(2048, 2048), 32 MiB of
parameters); each block is a unit and the whole model the root, with
``ShardingStrategy.FULL_SHARD`` (the default): the huge unit's parameters are
gathered in its forward and again in its backward. On gloo FSDP gathers on
the thread that asks, so the step waits for both.

The window profiles that model. After it the job times steps itself,
alternating it with a copy wrapped with ``ShardingStrategy.SHARD_GRAD_OP``
(the advice: the parameters kept gathered from forward to backward, no
backward gather), so that a loaded host weighs on both alike;
``steps-<rank>.json`` holds those steps' running times (less the thread's
wait for a CPU) by setting.

Usage: fsdp1_exposed.py ROOT_DIR
"""

import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

import dc_torch
from tests.distributed.spawn import spawn

STEPS = 11
TIMED = 16  # steps the job times itself after the window, alternating settings


def wrapped(model: nn.Sequential, strategy: ShardingStrategy) -> nn.Module:
    cpu = torch.device("cpu")
    units = [FullyShardedDataParallel(b, device_id=cpu, sharding_strategy=strategy) for b in model]
    return FullyShardedDataParallel(
        nn.Sequential(*units), device_id=cpu, sharding_strategy=strategy
    )


def worker(rank: int, world: int, root: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Linear(64, 2048), nn.ReLU()),
        nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048)),
        nn.Sequential(nn.ReLU(), nn.Linear(2048, 64)),
    )
    runs = {}
    for setting, strategy in (
        ("off", ShardingStrategy.FULL_SHARD),
        ("on", ShardingStrategy.SHARD_GRAD_OP),
    ):
        fsdp = wrapped(copy.deepcopy(model), strategy)
        runs[setting] = (fsdp, torch.optim.SGD(fsdp.parameters(), lr=1e-4))
    x = torch.randn(4, 64)
    train_step(*runs["on"], x)
    with dc_torch.profile(
        logdir=root,
        run="exposed",
        steps={"start": 1, "count": STEPS - 1},
        rank=rank,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(STEPS):
            train_step(*runs["off"], x)
            prof.step()
    times = {"off": [], "on": []}
    for i in range(TIMED):
        setting = ("off", "on")[i % 2]
        start, waited = time.monotonic_ns(), cpu_wait_ns()
        train_step(*runs[setting], x)
        # the step's running time: less its thread's wait for a CPU, which a
        # loaded host adds to each of the gathers' wake-ups
        times[setting].append(time.monotonic_ns() - start - (cpu_wait_ns() - waited))
    Path(root, f"steps-{rank}.json").write_text(json.dumps(times))
    dist.destroy_process_group()


def cpu_wait_ns() -> int:
    """ns this thread has waited, runnable, for a CPU (schedstat's second field)."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1])


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


if __name__ == "__main__":
    spawn(worker, 2, sys.argv[1])
    print("done")
