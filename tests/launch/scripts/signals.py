"""A plain PyTorch loop that waits in one step for a signal from outside."""

import argparse
import signal
import sys
import time

import torch
from torch import nn


def on_term(signum, frame):
    print("own SIGTERM handler ran", flush=True)
    sys.exit(7)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait-at", type=int, default=7)
    parser.add_argument("--own-handler", action="store_true")
    args = parser.parse_args()
    if args.own_handler:
        signal.signal(signal.SIGTERM, on_term)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    for step in range(12):
        loss = model(x).square().mean()
        loss.backward()
        if step == args.wait_at:
            print(f"waiting in step {step}", flush=True)
            time.sleep(60)
        opt.step()
        opt.zero_grad()
    print("not interrupted", flush=True)


if __name__ == "__main__":
    main()
