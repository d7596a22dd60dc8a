"""The Lightning demo: the tiny GPT trained by a Lightning ``Trainer`` with the callback.

This file is named ``demo*.py`` so the profiler treats it as user code: its
lines appear in profiles like any training script's. It prints nothing itself.
"""

from __future__ import annotations

import logging
import pathlib
import warnings
from typing import Any

import torch
from torch.nn import functional as F

from dc_torch.demo import make_workload

from dc_lightning.callback import _modules

pl = _modules[0]


class DemoGPT(pl.LightningModule):
    """The tiny GPT of ``dc_torch.demo`` as a LightningModule."""

    def __init__(self) -> None:
        super().__init__()
        self.model, _, self.batch = make_workload()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> Any:
        batches = [self.batch() for _ in range(8)]  # 8 batches of 8 sequences, fixed by the seed
        data = torch.utils.data.TensorDataset(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))
        return torch.utils.data.DataLoader(data, batch_size=len(batches[0][0]))


def run_demo(logdir: str, steps: int = 8) -> list[pathlib.Path]:
    """Fit the tiny GPT for ``steps`` steps with a window over steps 2.. and
    return the profile files written under ``logdir`` (the TensorBoard
    logger's ``version_N`` run)."""
    from dc_lightning import DeepContextCallback

    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    callback = DeepContextCallback(steps={"start": min(2, steps - 1), "count": max(1, min(4, steps - 2))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, default_root_dir=str(logdir),
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             log_every_n_steps=1, callbacks=[callback])
        trainer.fit(DemoGPT())
    return list(callback.written)


def demo(logdir: str, run: str | None = None) -> list[pathlib.Path]:
    """``deepcontext demo``'s workload: `run_demo`. ``run`` is not used: the
    Trainer's logger names its own run (``version_N``)."""
    return run_demo(logdir)
