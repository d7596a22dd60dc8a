"""Run by test_fsdp_frameworks.py: Lightning's ``ModelParallelStrategy`` (FSDP2,
``fully_shard`` in ``configure_model``) on two CPU processes (gloo), the tiny
GPT's blocks and the GPT itself sharded, with the one-line
``DeepContextCallback()`` (its default window). Over the same steps each rank
also runs torch.profiler: its counts of FSDP's own records, the sharded
modules' names (as the LightningModule's ``named_modules()`` gives them, with
FSDP's name for each, relative to its root) and each one's own parameter
bytes go to ``peer-<rank>.json``.

With ``bare``, no callback: ``deepcontext run -- torchrun ... lightning_fsdp.py
ROOT bare`` gives the trainer its own. Lightning re-launches this script for
rank 1 (torchrun starts both itself), so it must be a script, not a test.
Usage: lightning_fsdp.py ROOT_DIR [bare]
"""

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from lightning.pytorch import Callback
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.profiler import ProfilerActivity, profile

from dc_core import ProfilerConfig
from dc_lightning import DeepContextCallback
from tests.lightning.workload import TinyGPTModule, loader, trainer

WINDOW = ProfilerConfig().steps  # the callback's default window


def own_bytes(module: torch.nn.Module, inner: list) -> int:
    """Bytes of ``module``'s parameters that none of ``inner`` holds: its FSDP group's."""
    held = {id(p) for m in inner for p in m.parameters()}
    return sum(p.numel() * p.element_size() for p in module.parameters() if id(p) not in held)


class ShardedGPT(TinyGPTModule):
    def __init__(self) -> None:
        super().__init__(layers=2)
        self.sharded: dict[str, dict] = {}

    def configure_model(self) -> None:
        if isinstance(self.net, FSDPModule):
            return
        mesh = self.device_mesh["data_parallel"]
        blocks = list(self.net.blocks)
        names = {m: n for n, m in self.named_modules()}
        for module, inner in [*((b, []) for b in blocks), (self.net, blocks)]:
            fqn = names[module].removeprefix("net").lstrip(".")  # FSDP's, from its root
            self.sharded[names[module]] = {"fqn": fqn, "bytes": own_bytes(module, inner)}
        for block in blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(self.net, mesh=mesh)


class Peer(Callback):
    """torch.profiler over the window's steps, its FSDP records counted."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.prof = profile(activities=[ProfilerActivity.CPU])

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == WINDOW.start:
            self.prof.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != WINDOW.start + WINDOW.count:
            return
        self.prof.__exit__(None, None, None)
        records = Counter(e.name for e in self.prof.events() if e.name.startswith("FSDP::"))
        peer = {
            "records": records,
            "sharded": pl_module.sharded,
            "modules": [name for name, _ in pl_module.named_modules()],
        }
        Path(self.root, f"peer-{trainer.global_rank}.json").write_text(json.dumps(peer))


if __name__ == "__main__":
    torch.set_num_threads(1)
    root, bare = sys.argv[1], sys.argv[2:] == ["bare"]
    callbacks = [] if bare else [DeepContextCallback()]
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    trainer(
        strategy=strategy,
        devices=2,
        max_steps=WINDOW.start + WINDOW.count + 1,
        default_root_dir=root,
        callbacks=[*callbacks, Peer(root)],
    ).fit(ShardedGPT(), loader(batches=24))
    if torch.distributed.is_initialized():  # gloo's threads done before the interpreter ends
        torch.distributed.destroy_process_group()
