"""Run by test_fsdp_straggler.py: a planted straggler. FSDP2 on N CPU processes
(gloo), a 4-block MLP with each block and the root sharded, profiled over
steps 1-4. On rank SLOW only, block "2" spins SPIN_MS in its forward (a
forward hook: work the other ranks do not do); SLOW < 0 plants nothing (the
balanced control). The other ranks then wait for SLOW in the next all-gather.

Usage: fsdp_straggler.py ROOT_DIR RANKS SLOW SPIN_MS
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

import dc_torch
from tests.distributed.spawn import spawn

BLOCKS = 4
SLOW_BLOCK = 2
STEPS = 5  # the first one warms up, outside the window


def block() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def spin(ms: float):
    """A forward hook that keeps the CPU busy for ``ms`` of wall time: the
    excess the profile should show on this rank, whatever the host's load."""

    def hook(module, args, output):
        end = time.perf_counter_ns() + int(ms * 1e6)
        while time.perf_counter_ns() < end:
            pass
        return output

    return hook


def worker(rank: int, world: int, root: str, slow: int, spin_ms: float, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(*[block() for _ in range(BLOCKS)])
    if rank == slow:
        model[SLOW_BLOCK].register_forward_hook(spin(spin_ms))
    for b in model:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    with dc_torch.profile(
        logdir=root,
        run="straggler",
        steps={"start": 1, "count": STEPS - 1},
        rank=rank,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for _ in range(STEPS):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    root, ranks, slow, spin_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    spawn(worker, ranks, root, slow, spin_ms)
    print("done")
