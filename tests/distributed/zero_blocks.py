"""Run by test_zero.py: DeepSpeed ZeRO on N CPU processes (gloo), a 4-block
MLP, ``engine(x)`` / ``engine.backward(loss)`` / ``engine.step()``, profiled
with ``dc_torch.profile`` over steps 1-2. Over the same two steps each rank
also runs torch.profiler (its count of each ``c10d::`` collective); that and
each Linear's parameter bytes go to ``peer-<rank>.json``.

ZeRO-3 runs with nothing persistent or kept for reuse, so every Linear's
parameters are gathered before its forward and again before its backward,
and with a reduce bucket of one Linear's gradients. PREFETCH 0 turns the
coordinator's prefetch off (each module gathers its own parameters), 1 leaves
it at DeepSpeed's default.

Usage: zero_blocks.py ROOT_DIR RANKS STAGE PREFETCH
"""

import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import dc_torch
from tests.distributed.spawn import spawn

# DeepSpeed compiles its CPU shared-memory all-reduce (~30 s of g++, again
# whenever another ninja built it last) as its backend starts; only its
# inference all-reduce uses it, ZeRO's collectives go through torch.distributed
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

BLOCKS = 4
WIDTH, HIDDEN = 64, 256


def block() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, WIDTH))


def worker(rank: int, world: int, root: str, stage: int, prefetch: int, init: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[block() for _ in range(BLOCKS)])
    linear = WIDTH * HIDDEN + HIDDEN  # either Linear's parameter count
    sizes = {
        name: sum(p.numel() * p.element_size() for p in m.parameters())
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
    }
    zero: dict = {"stage": stage, "reduce_bucket_size": linear, "overlap_comm": False}
    if stage == 3:
        zero.update(
            stage3_param_persistence_threshold=0,
            stage3_max_reuse_distance=0,
            stage3_prefetch_bucket_size=5 * linear if prefetch else 0,
        )
    config = {
        "train_micro_batch_size_per_gpu": 32,
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
    }
    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    x = torch.randn(32, WIDTH)
    peer = profile(activities=[ProfilerActivity.CPU])
    with dc_torch.profile(
        logdir=root,
        run="zero",
        steps={"start": 1, "count": 2},
        rank=rank,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for step in range(4):
            loss = engine(x).pow(2).mean()
            engine.backward(loss)
            engine.step()
            prof.step()
            if step == 0:  # the window's first step begins
                peer.__enter__()
            elif step == 2:  # its last has ended
                peer.__exit__(None, None, None)
    records = Counter(e.name for e in peer.events() if e.name.startswith("c10d::"))
    Path(root, f"peer-{rank}.json").write_text(json.dumps({"records": records, "bytes": sizes}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    root, ranks, stage, prefetch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    spawn(worker, ranks, root, stage, prefetch)
    print("done")
