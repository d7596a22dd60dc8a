"""Training loops with one planted memory problem each (or its fix),
profiled with dc_torch and ``memory=True``.

Each ``run_*`` returns the profiles written, read back with their
single-window findings. Sizes are set by the bytes: CPU tensors, float32.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from tests.analyzer.helpers import analysed
from tests.analyzer.planted import _on_one_thread

MIB = 2**20


def _profiles(prof) -> list:
    return [analysed(read_profile(path)) for path in prof.written]


class Block(nn.Module):
    """A residual MLP block: at batch 2048, width 256, hidden 2048 its up
    projection's and its GELU's outputs (16 MiB each) are saved for backward."""

    def __init__(self, width: int = 256, hidden: int = 2048) -> None:
        super().__init__()
        self.up, self.act, self.down = nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(x)))


class Net(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


#: What the planted blocks' activations are, and what checkpointing each saves:
#: the 4 blocks' 32 MiB saved inside each, less the one recomputed at a time.
BLOCK_INSIDE = 32 * MIB
BLOCKS_GAIN = 3 * BLOCK_INSIDE


@_on_one_thread
def run_blocks(logdir, checkpointed: bool = False, steps: int = 6) -> list:
    """4 residual blocks at batch 2048 (their activations are most of the peak)
    with AdamW; ``checkpointed``: each block through torch.utils.checkpoint."""
    torch.manual_seed(0)
    model = Net(checkpointed)
    opt = torch.optim.AdamW(model.parameters())
    window = StepRange(start=2, count=3)
    with dc_torch.profile(logdir=str(logdir), steps=window, memory=True) as prof:
        for _ in range(steps):
            x = torch.randn(2048, 256)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return _profiles(prof)


@_on_one_thread
def run_optimizer(logdir, optimizer: str = "adamw", steps: int = 5) -> list:
    """Linear(2048, 4096) -> GELU -> Linear(4096, 2048), 64 MiB of parameters,
    at batch 16; AdamW keeps 2 values per parameter, SGD with momentum 1."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048))
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters())
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    window = StepRange(start=2, count=2)
    with dc_torch.profile(logdir=str(logdir), steps=window, memory=True) as prof:
        for _ in range(steps):
            loss = model(torch.randn(16, 2048)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return _profiles(prof)


#: The line of `run_history`'s planted leak (marked there), and what it keeps
#: each step: the monitoring batch (1 MiB), the outputs of the up projection
#: and the GELU (8 MiB each) and of the down projection (1 MiB), all saved by
#: the graph the appended loss holds, and the loss itself (4 bytes).
HISTORY_LINE = 1 + next(
    i for i, text in enumerate(Path(__file__).read_text().splitlines()) if text.endswith("# leak")
)
HISTORY_KEPT = 18 * MIB + 4
HISTORY_WINDOWS = StepRange(start=2, count=2, every=4, repeat=4)


@_on_one_thread
def run_history(logdir, leak: bool, steps: int = 16) -> list:
    """A loop logging a monitoring loss each step into ``history``: as a
    tensor (keeping its graph: it is computed with autograd on and never
    backpropagated), or with ``.item()``; windows of 2 steps every 4."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 2048), nn.GELU(), nn.Linear(2048, 256))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history = []
    with dc_torch.profile(logdir=str(logdir), steps=HISTORY_WINDOWS, memory=True) as prof:
        for _ in range(steps):
            loss = model(torch.randn(64, 256)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if leak:
                history.append(model(torch.randn(1024, 256)).pow(2).mean())  # leak
            else:
                history.append(model(torch.randn(1024, 256)).pow(2).mean().item())
            prof.step()
    return _profiles(prof)
