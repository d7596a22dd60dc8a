"""A plain PyTorch training script that knows nothing of any profiler."""

import argparse
import sys
import time

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

    def forward(self, x):
        return self.body(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--raise-at", type=int, default=-1)
    parser.add_argument("--loader", choices=("none", "fork", "spawn"), default="none")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per update")
    parser.add_argument(
        "--critic", action="store_true", help="a second optimizer, stepped after the first"
    )
    parser.add_argument(
        "--own-profiler", action="store_true", help="the script profiles itself (dc_torch.profile)"
    )
    parser.add_argument(
        "--load-s", type=float, default=0.0, help="seconds of work before training (a slow load)"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    loading = torch.randn(64, 64)
    end = time.monotonic() + args.load_s
    while time.monotonic() < end:
        loading = torch.tanh(loading @ loading)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    critic = nn.Linear(8, 1)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    batches = [(x, y)] * args.steps
    if args.loader != "none":
        data = torch.utils.data.TensorDataset(x.repeat(args.steps, 1), y.repeat(args.steps, 1))
        batches = torch.utils.data.DataLoader(
            data, batch_size=16, num_workers=1, multiprocessing_context=args.loader
        )
    prof = None
    if args.own_profiler:
        import dc_torch
        from dc_core import StepRange

        prof = dc_torch.profile(logdir="own-profiles", steps=StepRange(1, 2)).start()
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(batches):
            if step == args.raise_at:
                raise RuntimeError(f"planted failure at step {step}")
            for _ in range(args.accumulate - 1):
                nn.functional.mse_loss(model(x), y).backward()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if args.critic:
                critic_loss = critic(model(x).detach()).square().mean()
                critic_loss.backward()
                critic_opt.step()
                critic_opt.zero_grad()
            if prof is not None:
                prof.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    if prof is not None:
        prof.stop()
    print("argv", sys.argv[1:])
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
