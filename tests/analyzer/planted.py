"""Training loops with one planted problem each, profiled with dc_torch.

Each ``run_*`` trains a few steps inside ``dc_torch.profile`` and returns the
profiles written (one window, steps 2-4 unless said otherwise), with the
findings a reader of each file gets (the session leaves them to its readers).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import dc_torch
from dc_core.analyzer import findings_of  # noqa: F401 (the tests' entry)
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from tests.analyzer.helpers import analysed

WINDOW = StepRange(start=2, count=3)


def _profiles(prof):
    return [analysed(read_profile(path)) for path in prof.written]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Timings the rules read, on one torch thread: with two suites on two cores,
    OpenMP's spinning threads stretched a plain step from 15 ms to 190 ms and
    an op's backward several-fold, which decided findings, not the plants."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _on_one_thread(run: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _one_thread():
            return run(*args, **kwargs)

    return wrapper


def mlp(width: int = 1024) -> nn.Module:
    return nn.Sequential(
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
    )


@_on_one_thread
def run_healthy(logdir, steps: int = 6, batch: int = 512, width: int = 1024):
    """A compute-bound MLP: 3 x Linear(1024), batch 512, SGD."""
    torch.manual_seed(0)
    model = mlp(width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, width), torch.randn(batch, width)
    with dc_torch.profile(logdir=str(logdir), steps=WINDOW, system_interval_ms=50) as prof:
        for _ in range(steps):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return _profiles(prof)


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int):
        # big enough that its operators hold ~80% of the dataloader phase, the
        # DataLoader's own per-sample Python the rest: at 96x96 they held ~65%,
        # and on a loaded host under the 50% the rule needs to name this line
        sample = torch.randn(192, 192)
        for _ in range(4):  # an expensive per-sample transform in the main process
            sample = torch.tanh(sample @ sample) / 192
        return sample.flatten()[:256], torch.zeros(())


@_on_one_thread
def run_few_rows(logdir, mode: str, steps: int = 6):
    """No problem planted: a Linear(4096, 4096) over 4 rows a step. Its
    backward writes a fresh 64 MiB weight gradient each step, which costs
    (page faults on a CPU) 6-8x the forward's read of the weight: the nature
    of a GEMM over few rows, not a slow backward formula."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 4096), nn.Linear(4096, 4096), nn.Linear(4096, 64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4, 64)
    with dc_torch.profile(logdir=str(logdir), mode=mode, steps=WINDOW) as prof:
        for _ in range(steps):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    return _profiles(prof)


@_on_one_thread
def run_slow_getitem(logdir, steps: int = 6):
    torch.manual_seed(0)
    model = nn.Linear(256, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=32, num_workers=0)
    with dc_torch.profile(logdir=str(logdir), steps=WINDOW) as prof:
        for step, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if step + 1 == steps:
                break
    return _profiles(prof)


def decay_weights(x: torch.Tensor) -> torch.Tensor:
    """A running product along the sequence: cumprod, whose backward is slow."""
    return torch.cumprod(x, dim=1)


def ping_pong(x: torch.Tensor) -> torch.Tensor:
    """Round-trips through half precision for no reason."""
    for _ in range(6):
        x = x.half().float()
    return x


class RMSNorm(nn.Module):
    """Hand-written RMSNorm: an elementwise chain instead of the fused op."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Planted(nn.Module):
    """A small model carrying the context problems: cumprod, dtype ping-pong, RMSNorm."""

    def __init__(self, width: int = 512) -> None:
        super().__init__()
        self.norm = RMSNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        h = self.proj(ping_pong(self.norm(x)))
        return h.mean() + decay_weights(gates).mean()


@_on_one_thread
def run_planted_model(logdir, steps: int = 6):
    torch.manual_seed(0)
    model = Planted(width=128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # sizes chosen so each planted problem costs milliseconds per step (a busy
    # host's scheduling hiccups, ~10 ms, stay a small share of the window), each
    # far above its rule's share: cumprod's backward ~50% (5% needed), the casts
    # ~17% (5%), the norm ~6% (1%). The casts and the norm are memory-bound:
    # with a (32768, 128) input, 16 MiB per tensor, page faults made them swing
    # 10x from run to run (more on a loaded host, and casts run 4x slower on
    # some CPUs), which once pushed cumprod under its 5% share; at 8 MiB they
    # hold still, and cumprod's compute-bound backward keeps at least 10% if
    # they ever cost 4x more.
    # 2x the elements of a (2048, 512) input for the norm, half its matmul
    x = torch.randn(16384, 128)
    gates = torch.rand(512, 4096)
    gates[gates < 0.02] = 0  # zeros send cumprod's backward down its slow path
    gates.requires_grad_()
    losses = []
    with dc_torch.profile(logdir=str(logdir), steps=WINDOW) as prof:
        for _ in range(steps):
            loss = model(x, gates)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())  # a synchronising call in the loop
            prof.step()
    return _profiles(prof)


def straggler_work(x: torch.Tensor) -> torch.Tensor:
    """Extra work only the slow rank does."""
    for _ in range(4):
        x = torch.tanh(x @ x) / x.shape[0]
    return x


@_on_one_thread
def run_ranks(logdir, world_size: int = 3, slow_rank: int = 1, steps: int = 10):
    """The ranks of a job, run one after the other in this process, writing
    to one logdir; each rank's window has 8 steps. A busy spell on the host
    stretches whichever rank runs then: the rule must weigh work, not time."""
    written = []
    for rank in range(world_size):
        written += _run_rank(logdir, rank, world_size, slow_rank, steps)
    return written


def _run_rank(logdir, rank: int, world_size: int, slow_rank: int, steps: int) -> list:
    """One rank's job: an MLP step of about 10 ms, the straggler's about 9x
    that (4 more 1024^3 matmuls): far beyond what a loaded host's hiccups do
    to the rule's work measure, and step times of several-fold too."""
    torch.manual_seed(0)
    model = mlp(512)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512)
    with dc_torch.profile(
        logdir=str(logdir),
        steps=StepRange(start=2, count=8),
        rank=rank,
        host="node0",
        world_size=world_size,
    ) as prof:
        for _ in range(steps):
            loss = model(x).square().mean()
            if rank == slow_rank:
                loss = loss + straggler_work(torch.randn(1024, 1024)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return prof.written


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
