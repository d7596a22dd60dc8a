"""A real window with memory for the Memory view's screenshot: a
Linear → GELU → Linear MLP trained with AdamW on the CPU, memory by context on.

    python -m tests.tensorboard.memory_workload LOGDIR
"""

from __future__ import annotations

import sys


def train(logdir: str, steps: int = 4) -> None:
    """Four steps; steps 1 and 2 are profiled (one window)."""
    import torch

    import dc_torch
    from dc_core import StepRange

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    )
    opt = torch.optim.AdamW(model.parameters())
    window = StepRange(start=1, count=2)
    with dc_torch.profile(
        logdir=logdir, steps=window, memory=True, cpu_sampling_hz=0, system_interval_ms=0
    ) as prof:
        for _ in range(steps):
            x = torch.randn(64, 1024)
            y = model(x)
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()


if __name__ == "__main__":
    train(sys.argv[1])
