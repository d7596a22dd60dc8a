"""Run by test_ddp_buckets.py: plain PyTorch DDP on RANKS CPU processes (gloo), 4
blocks of two Linears each, buckets of 1 MiB (each Linear's parameters one
bucket after DDP rebuilds them at step 1), profiled with ``dc_torch.profile``
over steps 3-5. Rank SLOW (-1: none) sleeps SLEEP_MS in block 1's forward
each step, so the others wait for it in DDP's all-reduce when their backward
ends. Over the same steps each rank also runs torch.profiler (its count of
``c10d::allreduce_`` records); DDP's bucket assignment (each bucket's
parameter names in the order their gradients became ready, and its bytes)
goes with it to ``peer-<rank>.json``. HOOK, if given, is a communication
hook of ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``
(``fp16_compress_hook``: Python code that all-reduces each bucket in float16)
registered with ``register_comm_hook``.

Usage: ddp_buckets.py ROOT_DIR RANKS CAPTURE SLOW SLEEP_MS [HOOK]
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile

import dc_torch
from tests.distributed.spawn import spawn

START, COUNT = 3, 3


def worker(
    rank: int, world: int, root: str, capture: str, slow: int, sleep_ms: float, hook: str, init: str
):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)) for _ in range(4)]
    )
    if rank == slow:
        model[1].register_forward_pre_hook(lambda *_: time.sleep(sleep_ms / 1e3))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    if hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, getattr(default_hooks, hook))
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, 256)
    peer = profile(activities=[ProfilerActivity.CPU])
    with dc_torch.profile(
        logdir=root,
        run="ddp",
        steps={"start": START, "count": COUNT},
        rank=rank,
        capture=capture,
    ) as prof:
        for step in range(START + COUNT + 1):
            if step == START:
                peer.__enter__()
            ddp(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            if step == START + COUNT - 1:
                peer.__exit__(None, None, None)
            prof.step()
    logged = ddp._get_ddp_logging_data()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    buckets = [
        [names[int(i)] for i in bucket.split()]
        for bucket in logged["rebuilt_per_bucket_param_indices"].split(", ")
    ]
    records = sum(e.count for e in peer.key_averages() if e.key == "c10d::allreduce_")
    out = {
        "buckets": buckets,
        "bucket_bytes": [int(b) for b in logged["rebuilt_bucket_sizes"].split(", ")],
        "records": records,
    }
    Path(root, f"peer-{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    root, ranks, capture = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    hook = sys.argv[6] if len(sys.argv) > 6 else ""
    spawn(worker, ranks, root, capture, int(sys.argv[4]), float(sys.argv[5]), hook)
