"""Run by test_zero.py under ``deepcontext run -- torchrun``: a plain
DeepSpeed ZeRO-3 loop that knows nothing of DeepContext, with DeepSpeed's
defaults but two micro-batches per update (``engine.step()`` updates every
second call). Each worker writes the engine's count of updates to
``updates-<rank>.json``.

Usage: zero_run.py OUT_DIR
"""

import importlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed
import torch
from torch import nn

# DeepSpeed compiles its CPU shared-memory all-reduce (~30 s of g++, again
# whenever another ninja built it last) as its backend starts; only its
# inference all-reduce uses it, ZeRO's collectives go through torch.distributed
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

deepspeed.init_distributed(dist_backend="gloo")
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(
    *[nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)) for _ in range(2)]
)
config = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 2,
    "zero_optimization": {"stage": 3},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
x = torch.randn(16, 64)
for _ in range(2 * 6):  # six updates
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
rank = torch.distributed.get_rank()
Path(sys.argv[1], f"updates-{rank}.json").write_text(json.dumps(engine.global_steps))
