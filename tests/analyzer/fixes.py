"""Fixable problems, each as a training loop run with the problem (``fixed``
False) or with its fix (True), profiled with dc_torch.

Each ``run_*`` returns the one profile it wrote (a window of `WINDOW`
steps, read back with its findings). Sizes put each problem's cost far above
what a loaded 2-core host does to a step (a few ms), and the rest of the
step small next to it, so the saving a diff of the two runs measures is the
problem's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import nn

import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from dc_core.store.profile import Profile
from tests.analyzer.helpers import analysed
from tests.analyzer.planted import _on_one_thread

WINDOW = StepRange(start=6, count=6)
STEPS = WINDOW.start + WINDOW.count + 1


def _train(logdir, step: Callable[[], None], steps: int = STEPS) -> Profile:
    with dc_torch.profile(logdir=str(logdir), steps=WINDOW) as prof:
        for _ in range(steps):
            step()
            prof.step()
    (path,) = prof.written
    return analysed(read_profile(path))


def _sgd_step(
    model: nn.Module, loss_of: Callable[[], torch.Tensor], opt=None
) -> Callable[[], None]:
    opt = opt or torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = loss_of()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


@_on_one_thread
def run_dtype(logdir, fixed: bool) -> Profile:
    """Inputs kept in float64 (as numpy gives them) and cast in every step,
    or cast once before training. The model is small: the casts are the step."""
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    stored = torch.randn(4, 262144, 16, dtype=torch.float64)
    inputs = stored.float() if fixed else stored
    batch = iter(range(1 << 30))

    def loss() -> torch.Tensor:
        x = inputs[next(batch) % 4]
        if not fixed:
            x = x.float()
        return model(x[::64]).square().mean()

    return _train(logdir, _sgd_step(model, loss))


@_on_one_thread
def run_optimizer(logdir, fixed: bool) -> Profile:
    """Adam over 600 tiny tensors, per tensor (foreach=False) or fused, as the
    finding advises. Their gradients are set once: the step is the update (a
    backward over 600 tensors would drift by more than the update's saving on
    a shared host)."""
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(4, 4)) for _ in range(600)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(params, lr=1e-3, **({"fused": True} if fixed else {"foreach": False}))
    return _train(logdir, opt.step)


class SlowSamples(torch.utils.data.Dataset):
    """Each sample waits 2 ms, as a decode from disk would."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int):
        time.sleep(0.002)
        return torch.full((64,), float(index % 7)), torch.zeros(())


@_on_one_thread
def run_dataloader(logdir, fixed: bool) -> Profile:
    """Batches of 8 slow samples (16 ms) in the step's process, or in 2 workers
    that prepare them while a ~20 ms step computes, 16 batches ahead: more
    than the window takes, so workers a loaded host starves for a while still
    have its batches ready (2 ahead, a starved pair left the fixed step
    waiting 2 ms in one run of four)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        SlowSamples(),
        batch_size=8,
        num_workers=2 if fixed else 0,
        persistent_workers=fixed,
        prefetch_factor=8 if fixed else None,
    )
    batches = iter(loader)
    work = torch.randn(256, 512)

    def step() -> None:
        x, y = next(batches)
        loss = nn.functional.mse_loss(model(x).mean(-1), y)
        # the step's own compute (~1 ms each), which workers can hide the loading behind
        for _ in range(20):
            loss = loss + (work @ work.T).mean() * 0
        opt.zero_grad()
        loss.backward()
        opt.step()

    return _train(logdir, step)


@_on_one_thread
def run_item(logdir, fixed: bool) -> Profile:
    """A per-sample loss read into Python one sample at a time, or once."""
    torch.manual_seed(0)
    model = nn.Linear(64, 1)
    x, y = torch.randn(1024, 64), torch.randn(1024)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    totals = []

    def step() -> None:
        per_sample = (model(x).squeeze(-1) - y).square()
        loss = per_sample.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        detached = per_sample.detach()
        if fixed:
            totals.append(detached.sum().item())
        else:
            totals.append(sum(detached[i].item() for i in range(len(detached))))

    return _train(logdir, step)


class RowSum(nn.Module):
    """Sums the rows of its input: with a Python loop, or one operator."""

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.fixed:
            return h.sum(0)
        total = torch.zeros(64)
        for i in range(h.shape[0]):
            total = total + h[i]
        return total


def _fit(logdir, model: nn.Module, x: torch.Tensor) -> Profile:
    """Train ``model`` on a fixed input with SGD, its loss the mean square of its output."""
    return _train(logdir, _sgd_step(model, lambda: model(x).square().mean()))


@_on_one_thread
def run_loop(logdir, fixed: bool) -> Profile:
    torch.manual_seed(0)
    return _fit(logdir, RowSum(fixed), torch.randn(600, 64))


class Norm(nn.Module):
    """LayerNorm written out by hand, or F.layer_norm."""

    def __init__(self, dim: int, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class Normed(nn.Module):
    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 256)
        self.norm = Norm(256, fixed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x))


@_on_one_thread
def run_norm(logdir, fixed: bool) -> Profile:
    torch.manual_seed(0)
    return _fit(logdir, Normed(fixed), torch.randn(8192, 256))


#: name -> (runner, the rule that must find it, a frame its path names)
PROBLEMS = {
    "dtype": (run_dtype, "dtype_conversion", "run_dtype.<locals>.loss"),
    "optimizer": (run_optimizer, "optimizer_unfused", "optimizer"),
    "dataloader": (run_dataloader, "dataloader_bottleneck", "SlowSamples.__getitem__"),
    "item": (run_item, "host_sync", "run_item.<locals>.step"),
    "loop": (run_loop, "small_ops", "RowSum.forward"),
    "norm": (run_norm, "unfused_norm", "Norm.forward"),
}
