"""Run by test_ddp.py: Lightning DDP on two CPU processes (gloo) with the callback.

Lightning re-launches this script for rank 1, so it must be a script, not a test.
Usage: ddp_fit.py ROOT_DIR
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from dc_lightning import DeepContextCallback
from tests.lightning.workload import TinyGPTModule, loader, trainer

if __name__ == "__main__":
    torch.set_num_threads(1)
    root = sys.argv[1]
    callback = DeepContextCallback(
        steps={"start": 2, "count": 3}, cpu_sampling_hz=0, system_interval_ms=0
    )
    trainer(
        strategy="ddp", devices=2, max_steps=6, default_root_dir=root, callbacks=[callback]
    ).fit(TinyGPTModule(), loader(batches=24))
    print("written", callback.written)
    # As every DDP script should: without it gloo's threads may still hold work
    # when the interpreter finalizes, and the process aborts at exit now and then
    # ("terminate called without an active exception", a known c10d issue).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
