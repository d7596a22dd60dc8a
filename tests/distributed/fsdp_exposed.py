"""Run by test_fsdp.py: a planted exposed all-gather. FSDP2 on 2 CPU processes
(gloo): block "0" is small and waits 150 ms in its forward, block "1" is huge
(2 x Linear(2048, 2048), 32 MiB of parameters) and resharded after forward,
block "2" is small and waits 150 ms in its forward and in its backward. The
waits stand in for work that leaves the host free (a device computing): what a
gather can hide behind, even on a loaded host, where gloo's thread takes up to
100 ms to move the block.

Windows profile FSDP2's defaults, whose prefetches run synchronously on
gloo, so the huge block's all-gather is waited for in forward and again in
backward. Between them the job times pairs of steps itself
(`tests.distributed.paired`): one of each pair so, the other with
prefetching on (the groups unshard asynchronously and block 0 prefetches
block 1 in forward; FSDP's own backward prefetch, from block 2, does it in
backward). ``steps-<rank>.json`` holds those step times by setting.

Usage: fsdp_exposed.py ROOT_DIR
"""

import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from tests.distributed.paired import windows_between_pairs
from tests.distributed.spawn import spawn

WAIT_S = 0.15


class Wait(nn.Module):
    """Waits in forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(WAIT_S)
        return x


class WaitInBackward(torch.autograd.Function):
    """Waits in backward as long as in forward: a backward of the usual
    multiple of its forward, which no finding flags."""

    @staticmethod
    def forward(ctx, x):
        time.sleep(WAIT_S)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(WAIT_S)
        return grad


class WaitBackward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return WaitInBackward.apply(x)


def prefetch(model: nn.Module, on: bool) -> None:
    model._set_unshard_async_op(on)
    model[0].set_modules_to_forward_prefetch([model[1]] if on else [])


def worker(rank: int, world: int, root: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Linear(64, 2048), Wait()),
        nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048)),
        nn.Sequential(WaitBackward(), nn.Linear(2048, 64)),
    )
    for block in model:
        fully_shard(block, reshard_after_forward=True)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4, 64)
    train_step(model, opt, x)  # FSDP's first step initializes it: timed by none
    windows_between_pairs(
        root,
        rank,
        {
            "off": functools.partial(step, model, opt, x, False),
            "on": functools.partial(step, model, opt, x, True),
        },
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    dist.destroy_process_group()


def step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, prefetching: bool) -> None:
    prefetch(model, prefetching)
    train_step(model, opt, x)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


if __name__ == "__main__":
    spawn(worker, 2, sys.argv[1])
    print("done")
