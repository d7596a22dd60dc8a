"""Run by test_fsdp1.py: FSDP1 (the ``FullyShardedDataParallel`` wrapper) on
two CPU processes (gloo), four blocks of different widths each wrapped as a
unit and the whole model as the root, AdamW, profiled with
``dc_torch.profile`` over steps 1-2. Over the same two steps each rank also
runs torch.profiler: its counts of FSDP1's own records and of the
collectives, and each unit's gathered flat parameter's bytes, go to
``peer-<rank>.json``.

Usage: fsdp1_blocks.py ROOT_DIR CAPTURE [VARIANT]

VARIANT (`VARIANTS`): ``plain`` (the defaults), ``orig-bf16`` (the original
parameters kept, ``use_orig_params=True``, gathered and reduced in bfloat16),
``no-shard`` (``ShardingStrategy.NO_SHARD``: whole parameters on every rank,
gradients all-reduced), ``hybrid`` (``ShardingStrategy.HYBRID_SHARD`` on four
ranks, a 2 x 2 mesh: parameters sharded within a pair of ranks, a "node", and
each shard's gradients all-reduced across the pairs).
"""

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
from torch.profiler import ProfilerActivity, profile

import dc_torch
from tests.distributed.spawn import spawn

WIDTHS = (128, 256, 384, 512)  # block i's hidden width: its gathers' bytes tell it apart
#: Each variant's arguments to every unit and the root.
VARIANTS = {
    "plain": {},
    "orig-bf16": {
        "use_orig_params": True,
        "mixed_precision": MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16),
    },
    "no-shard": {"sharding_strategy": ShardingStrategy.NO_SHARD},
    "hybrid": {"sharding_strategy": ShardingStrategy.HYBRID_SHARD},
}
#: The ranks each variant runs on.
RANKS = {"hybrid": 4}


def worker(rank: int, world: int, root: str, capture: str, variant: str, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    blocks = [nn.Sequential(nn.Linear(64, w), nn.ReLU(), nn.Linear(w, 64)) for w in WIDTHS]
    settings = dict(VARIANTS[variant])
    if variant == "hybrid":  # (replicas, shards): a pair of ranks per "node"
        settings["device_mesh"] = init_device_mesh("cpu", (world // 2, 2))
    units = [FullyShardedDataParallel(b, device_id=cpu, **settings) for b in blocks]
    model = FullyShardedDataParallel(nn.Sequential(*units), device_id=cpu, **settings)
    # a gather brings every rank's shard of the unit's flat parameter (padded
    # to a multiple of the ranks: `numel` of the shard times them), in the
    # dtype it is gathered in; the ranks are those the unit shards over (a
    # node's, under HYBRID_SHARD)
    mixed = settings.get("mixed_precision")
    element = (mixed.param_dtype if mixed else torch.float32).itemsize
    gathered = {
        str(i): u._handle.flat_param.numel()
        * (u.process_group.size() if u._handle.uses_sharded_strategy else 1)
        * element
        for i, u in enumerate(units)
    }
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    peer = profile(activities=[ProfilerActivity.CPU])
    with dc_torch.profile(
        logdir=root,
        run="fsdp1",
        steps={"start": 1, "count": 2},
        rank=rank,
        capture=capture,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        for step in range(4):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
            if step == 0:  # the window's first step begins
                peer.__enter__()
            elif step == 2:  # its last has ended
                peer.__exit__(None, None, None)
    records = Counter(
        e.name for e in peer.events() if e.name.startswith(("FullyShardedDataParallel.", "c10d::"))
    )
    Path(root, f"peer-{rank}.json").write_text(
        json.dumps({"records": records, "gathered_bytes": gathered})
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    root, capture = sys.argv[1], sys.argv[2]
    variant = sys.argv[3] if len(sys.argv) > 3 else "plain"
    spawn(worker, RANKS.get(variant, 2), root, capture, variant)
    print("done")
