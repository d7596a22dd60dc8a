"""Run by test_ddp_buckets.py: DDP's all-reduce planted exposed when backward
ends. Plain PyTorch DDP on 2 CPU processes (gloo): a small Linear "0", a
module "1" that waits FORWARD_S in its forward and BACKWARD_S in its
backward (standing in for work that leaves the host free: a device
computing), then
Linear(64, 4096), Linear(4096, 4096) and Linear(4096, 64) (66 MiB of
gradients). With ``bucket_cap_mb=100``
every gradient shares one bucket, launched only once "0"'s gradient comes,
after the wait: the whole all-reduce is waited for when backward ends.

Windows profile that model, between pairs of steps the job times itself
(`tests.distributed.paired`): one of each pair with it, the other with a copy
wrapped with ``bucket_cap_mb=FIXED_CAP_MB`` (the advice's value), whose big
gradients' buckets launch before the wait and hide behind it.
``steps-<rank>.json`` holds those step times by setting.

Usage: ddp_exposed.py ROOT_DIR
"""

import copy
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tests.distributed.paired import windows_between_pairs
from tests.distributed.spawn import spawn

# the backward's wait hides the fixed buckets' all-reduce; the forward's is
# short so that the exposed wait stays well above the rule's share of a step
FORWARD_S, BACKWARD_S = 0.04, 0.18
PLANTED_CAP_MB, FIXED_CAP_MB = 100, 16


class WaitBothWays(torch.autograd.Function):
    """Waits in forward and 4.5x as long in backward: within the usual multiple
    of a backward, which no finding flags."""

    @staticmethod
    def forward(ctx, x):
        time.sleep(FORWARD_S)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(BACKWARD_S)
        return grad


class Wait(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return WaitBothWays.apply(x)


def worker(rank: int, world: int, root: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 64),
        Wait(),
        nn.Linear(64, 4096),
        nn.Linear(4096, 4096),
        nn.Linear(4096, 64),
    )
    fixed_model = copy.deepcopy(model)
    # gradients as views into the buckets: no copies into them and back, which
    # would thin the wait's share of a step
    planted = DistributedDataParallel(
        model, bucket_cap_mb=PLANTED_CAP_MB, gradient_as_bucket_view=True
    )
    fixed = DistributedDataParallel(
        fixed_model, bucket_cap_mb=FIXED_CAP_MB, gradient_as_bucket_view=True
    )
    runs = {
        "off": (planted, torch.optim.SGD(planted.parameters(), lr=1e-4)),
        "on": (fixed, torch.optim.SGD(fixed.parameters(), lr=1e-4)),
    }
    x = torch.randn(4, 64)
    for run in runs.values():  # buckets rebuilt in the order gradients come: timed by none
        train_step(*run, x)
    windows_between_pairs(
        root,
        rank,
        {setting: functools.partial(train_step, *run, x) for setting, run in runs.items()},
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
