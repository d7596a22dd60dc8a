"""Small models for the adapter tests (a user file: its lines appear in profiles)."""

from __future__ import annotations

import torch
from torch import nn


def sharpen(h):
    return torch.softmax(h * 2.0, dim=-1)


class TwoLine(nn.Module):
    """Two lines of forward; the second calls the named helper ``sharpen``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        return sharpen(h)


class Exploding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.lin(x)  # some work first: the native path sees modules through their operators
        raise KeyError("boom from the user's forward")


def train(model, steps, profiler=None, batches=None, seed=0):
    """A plain loop; returns the losses."""
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        x = batches[step] if batches is not None else torch.randn(4, 8)
        loss = model(x).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if profiler is not None:
            profiler.step()
    return losses
