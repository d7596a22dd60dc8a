"""Lightning fit of a small model with and without DeepContextCallback, every
step outside any window: the callback must add nothing measurable (≤ ×1.02).

Runs alternate (without, with) so drift on a shared machine hits both; the
best of each is compared. Usage: python benchmarks/callback_overhead.py [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from dc_lightning import DeepContextCallback
from tests.lightning.workload import TinyGPTModule, loader, trainer


def fit_seconds(steps: int, callback: bool, root: str) -> float:
    callbacks = [DeepContextCallback(steps={"start": 10**9, "count": 1})] if callback else []
    torch.manual_seed(0)
    fit = trainer(max_steps=steps, logger=False, default_root_dir=root, callbacks=callbacks)
    data = loader(batches=steps, batch=4)
    start = time.perf_counter()
    fit.fit(TinyGPTModule(layers=2), data)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        fit_seconds(10, False, root)  # warm-up: imports, allocator, first-call costs
        fit_seconds(10, True, root)
        without, with_cb = [], []
        for _ in range(args.repeats):
            without.append(fit_seconds(args.steps, False, root))
            with_cb.append(fit_seconds(args.steps, True, root))
    base, cb = min(without), min(with_cb)
    print(
        f"Lightning fit, {args.steps} steps, best of {args.repeats}: "
        f"without {base * 1e3 / args.steps:.3f} ms/step, with callback (outside windows) "
        f"{cb * 1e3 / args.steps:.3f} ms/step, ratio {cb / base:.4f} (target <= 1.02)"
    )


if __name__ == "__main__":
    main()
