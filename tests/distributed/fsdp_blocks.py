"""Run by test_fsdp.py: FSDP2 (``fully_shard``) on N CPU processes (gloo), a
4-block MLP with each block and the root sharded, AdamW, profiled with
``dc_torch.profile`` over steps 1-2. Over the same two steps each rank also
runs torch.profiler (its count of FSDP's own ``FSDP::all_gather (<fqn>)`` and
``FSDP::post_backward_reduce (<fqn>)`` records per block) and times, with
wrappers of its own around the process group's collective calls and
``Work.wait``, how long the step spent in communication; both go to ``peer-<rank>.json``.

Usage: fsdp_blocks.py ROOT_DIR RANKS CAPTURE
"""

import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.profiler import ProfilerActivity, profile

import dc_torch
from tests.distributed.spawn import spawn

BLOCKS = 4


def block() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))


def worker(rank: int, world: int, root: str, capture: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(*[block() for _ in range(BLOCKS)])
    sizes = {
        str(i): sum(p.numel() * p.element_size() for p in b.parameters())
        for i, b in enumerate(model)
    }
    for b in model:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)

    # ns the training thread spent in waits on the process group's works and
    # in its collective calls (a backend may run the collective there), while
    # counting
    spent = {"wait": 0, "call": 0}
    state = [False, 0]  # counting, depth inside a timed call

    def timed(func, kind):
        def call(*args, **kwargs):
            start = time.monotonic_ns()
            state[1] += 1
            try:
                return func(*args, **kwargs)
            finally:
                state[1] -= 1
                if state[0] and not state[1]:
                    spent[kind] += time.monotonic_ns() - start

        return call

    work, group = torch._C._distributed_c10d.Work, torch._C._distributed_c10d.ProcessGroup
    plain = (work.wait, group.all_gather_single, group.reduce_scatter_single)
    work.wait = timed(work.wait, "wait")
    group.all_gather_single = timed(group.all_gather_single, "call")
    group.reduce_scatter_single = timed(group.reduce_scatter_single, "call")
    peer = profile(activities=[ProfilerActivity.CPU])
    with dc_torch.profile(
        logdir=root,
        run="fsdp",
        steps={"start": 1, "count": 2},
        rank=rank,
        capture=capture,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for step in range(4):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
            if step == 0:  # the window's first step begins
                peer.__enter__()
                state[0] = True
            elif step == 2:  # its last has ended
                state[0] = False
                peer.__exit__(None, None, None)
    work.wait, group.all_gather_single, group.reduce_scatter_single = plain
    records = Counter(e.name for e in peer.events() if e.name.startswith("FSDP::"))
    Path(root, f"peer-{rank}.json").write_text(
        json.dumps({"records": records, "spent_ns": spent, "block_bytes": sizes})
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    root, ranks, capture = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    spawn(worker, ranks, root, capture)
    print("done")
