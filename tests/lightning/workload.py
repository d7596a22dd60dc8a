"""A tiny GPT LightningModule and its data, shared by the Lightning and distributed tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dc_torch.demo import TinyGPT

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - pytorch_lightning only
    import pytorch_lightning as pl


class TinyGPTModule(pl.LightningModule):
    def __init__(self, vocab: int = 64, d: int = 32, layers: int = 1, context: int = 16) -> None:
        super().__init__()
        self.net = TinyGPT(vocab=vocab, d=d, heads=2, layers=layers, context=context)

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        return self.loss(batch)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class SequentialModule(pl.LightningModule):
    """As Lightning's examples write it: ``self.net = nn.Sequential(...)``, called from ``training_step``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x.float()), y[:, 0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DemoTransformerModule(pl.LightningModule):
    """Lightning's own demo ``Transformer`` (model code shipped inside ``lightning``), tiny."""

    def __init__(self, vocab: int = 64) -> None:
        super().__init__()
        from lightning.pytorch.demos import Transformer

        self.model = Transformer(vocab_size=vocab, ninp=16, nhead=2, nhid=16, nlayers=2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.nll_loss(self.model(x, y), y.flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(batches: int = 16, batch: int = 4, vocab: int = 64, context: int = 16, seed: int = 0):
    tokens = torch.randint(
        0, vocab, (batches * batch, context + 1), generator=torch.Generator().manual_seed(seed)
    )
    data = torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])
    return torch.utils.data.DataLoader(data, batch_size=batch)


def trainer(**kwargs):
    settings = dict(
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    return pl.Trainer(**{**settings, **kwargs})
