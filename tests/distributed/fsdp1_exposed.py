"""Run by test_fsdp1.py: a planted exposed all-gather under FSDP1 (the
``FullyShardedDataParallel`` wrapper) on 2 CPU processes (gloo). Block "0"
and "2" are small, block "1" is huge (2 x Linear(2048, 2048), 32 MiB of
parameters); each block is a unit and the whole model the root, with
``ShardingStrategy.FULL_SHARD`` (the default): the huge unit's parameters are
gathered in its forward and again in its backward. On gloo FSDP gathers on
the thread that asks, so the step waits for both.

Windows profile that model. Between them the job times pairs of steps
itself (`tests.distributed.paired`): one of each pair with it, the other
with a copy wrapped with ``ShardingStrategy.SHARD_GRAD_OP`` (the advice: the
parameters kept gathered from forward to backward, no backward gather);
``steps-<rank>.json`` holds those steps' running times (less the thread's
wait for a CPU) by setting.

Usage: fsdp1_exposed.py ROOT_DIR
"""

import copy
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

from tests.distributed.paired import windows_between_pairs
from tests.distributed.spawn import spawn


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
    for run in runs.values():  # the first step initializes each: timed by none
        train_step(*run, x)
    windows_between_pairs(
        root,
        rank,
        {setting: functools.partial(train_step, *run, x) for setting, run in runs.items()},
        running_time=True,  # a loaded host adds its wait for a CPU to each gather's wake-up
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    dist.destroy_process_group()


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


if __name__ == "__main__":
    spawn(worker, 2, sys.argv[1])
    print("done")
