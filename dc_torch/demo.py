"""A tiny GPT-style model and training loop: the demo and benchmark workload.

This file is named ``demo*.py`` so the profiler treats it as user code: its
lines appear in profiles like any training script's.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal scaled dot-product attention, written out so its lines show."""
    t = q.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT-style decoder: token + position embeddings, blocks, tied-free head."""

    def __init__(self, vocab: int = 512, d: int = 128, heads: int = 4, layers: int = 4, context: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def make_workload(seed: int = 0, batch: int = 8, context: int = 64, vocab: int = 512) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    """The benchmark workload: model, AdamW, and a ``batch()`` function of random tokens."""
    torch.manual_seed(seed)
    model = TinyGPT(vocab=vocab, context=context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, context + 1)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, shape, generator=generator)
        return tokens[:, :-1], tokens[:, 1:]

    return model, optimizer, next_batch


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One training step: forward, loss, backward, AdamW."""
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def run_demo(logdir: str, steps: int = 8, **overrides: Any) -> list[pathlib.Path]:
    """Train the tiny GPT for ``steps`` steps with a window over steps 2.. and
    return the profile files written under ``logdir``."""
    from dc_core.record.config import StepRange

    from dc_torch import profile

    model, optimizer, batch = make_workload()
    window = StepRange(start=min(2, steps - 1), count=max(1, min(4, steps - 2)))
    settings = {"logdir": str(logdir), "steps": window, **overrides}
    with profile(**settings) as prof:
        for _ in range(steps):
            x, y = batch()
            train_step(model, optimizer, x, y)
            prof.step()
    return list(prof.written)
