"""A small training loop touching every hook the PyTorch adapter installs, and
a snapshot of every piece of torch's global state those hooks change.

The loop is deterministic (fixed seed and batches), so a profiled run and an
unprofiled run must produce bit-identical losses and weights."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dc_core.record.session import active_sessions


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        return torch.softmax(self.out(h), dim=-1)


def train(
    steps: int = 4, profiler: Any = None, seed: int = 0
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses and final weights of ``steps`` SGD steps (``profiler.step()`` after each)."""
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(steps * 4, 8), torch.randn(steps * 4, 4))
    losses = []
    for x, y in DataLoader(data, batch_size=4):
        loss = (model(x) - y).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        if dist.is_available() and dist.is_initialized():
            for p in model.parameters():
                dist.all_reduce(p.grad)
        optimizer.step()
        losses.append(loss.item())
        if profiler is not None:
            profiler.step()
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_training(a: tuple, b: tuple) -> bool:
    """Bit-identical losses and weights."""
    (losses_a, weights_a), (losses_b, weights_b) = a, b
    return (
        losses_a == losses_b
        and weights_a.keys() == weights_b.keys()
        and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    )


def torch_state() -> dict[str, Any]:
    """Everything of torch's process-wide state the adapter hooks while a window
    is open, by identity: equal before and after means torch is as it was."""
    from torch.nn.modules import module as module_mod
    from torch.optim import optimizer as optimizer_mod
    from torch.utils.data import dataloader as dataloader_mod

    C = torch._C
    return {
        "function modes": [
            C._get_function_stack_at(i) for i in range(C._len_torch_function_stack())
        ],
        "dispatch modes": [
            C._get_dispatch_stack_at(i) for i in range(C._len_torch_dispatch_stack())
        ],
        "module pre-hooks": list(module_mod._global_forward_pre_hooks.values()),
        "module hooks": list(module_mod._global_forward_hooks.values()),
        "optimizer pre-hooks": list(optimizer_mod._global_optimizer_pre_hooks.values()),
        "optimizer post-hooks": list(optimizer_mod._global_optimizer_post_hooks.values()),
        "Optimizer.zero_grad": torch.optim.Optimizer.__dict__["zero_grad"],
        "DataLoader iterator __next__": dataloader_mod._BaseDataLoaderIter.__dict__["__next__"],
        "autograd.backward": torch.autograd.__dict__["backward"],
        "autograd.grad": torch.autograd.__dict__["grad"],
        "RecordFunction callback": _native_capture_on(),
        "live sessions": active_sessions(),
    }


def _native_capture_on() -> bool:
    from dc_torch.native import load

    extension = load()[0]
    return extension is not None and extension.active()


def single_process_group(directory: str) -> None:
    """A gloo group of one rank, so collectives run through c10d like in a real job."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=0, world_size=1)
