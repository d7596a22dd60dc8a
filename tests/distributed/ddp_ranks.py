"""Run by test_ddp.py: plain PyTorch DDP on N CPU processes (gloo), each profiled
with ``dc_torch.profile``; one rank runs its MLP 16 times on a batch 16 times
larger, so the others wait for it in DDP's all-reduce. The others' work is
kept small on purpose: with 9 processes on 2 cores, every op that is
preempted gains milliseconds of wall time, so the ranks must not overlap
much for the slow one to stand far above that noise.

Usage: ddp_ranks.py ROOT_DIR RANKS SLOW_RANK
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn

import dc_torch
from tests.distributed.spawn import spawn


class Block(nn.Module):
    def __init__(self, repeat: int) -> None:
        super().__init__()
        self.attn = nn.Linear(128, 128)
        self.mlp = nn.Sequential(nn.Linear(128, 1024), nn.GELU(), nn.Linear(1024, 128))
        self.repeat = repeat

    def forward(self, x):
        x = x + self.attn(x).tanh()
        for _ in range(self.repeat):  # the slow rank runs its MLP several times
            x = x + self.mlp(x) * 0.1
        return x


def worker(rank: int, world: int, slow: int, root: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(Block(16 if rank == slow else 1), nn.Linear(128, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256 if rank == slow else 16, 128)
    with dc_torch.profile(
        logdir=root,
        run="ddp",
        steps={"start": 2, "count": 3},
        rank=rank,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(6):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    root, ranks, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spawn(worker, ranks, slow, root)
    print("done")
