"""A DDP script for torchrun (gloo on CPU) that knows nothing of any profiler."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    for step in range(8):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
