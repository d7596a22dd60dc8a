"""The optimizer phase as DeepContext measures it, against torch.profiler's own
``Optimizer.step#<Class>.step`` record, on workloads this project did not write:
lightning's demo ``Transformer`` with SGD, and a tiny Hugging Face BERT (from a
config, no download) with AdamW. A profiler that inflates per-op costs makes
an optimizer's hundreds of per-parameter ops look slower than they are.

For each workload, in one process, alternating over rounds: the optimizer step
timed alone (unprofiled), a DeepContext window (native capture: the
``<Class>.step`` frame's inclusive time) and a torch.profiler session over the
same number of steps. Printed: ms per step of each, and the ratio of the two
profilers (target: within ×1.2).

    python benchmarks/optimizer_phase.py [--steps 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles
from dc_torch import Profiler


def demo_transformer() -> tuple[Callable[[], None], str, list[float]]:
    from lightning.pytorch.demos import Transformer

    torch.manual_seed(0)
    model = Transformer(vocab_size=1000, ninp=64, nhead=2, nhid=64, nlayers=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randint(0, 1000, (8, 32))

    step, timed = _training_step(
        lambda: torch.nn.functional.nll_loss(model(data, data), data.view(-1)), optimizer
    )
    return step, "SGD", timed


def tiny_bert() -> tuple[Callable[[], None], str, list[float]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (8, 32))
    labels = torch.randint(0, 2, (8,))

    step, timed = _training_step(lambda: model(input_ids=ids, labels=labels).loss, optimizer)
    return step, "AdamW", timed


def _training_step(
    loss_of: Callable[[], torch.Tensor], optimizer: Any
) -> tuple[Callable[[], None], list[float]]:
    """A training step, and the list its ``optimizer.step()`` times (s) go to."""
    timed: list[float] = []

    def step() -> None:
        loss = loss_of()
        optimizer.zero_grad()
        loss.backward()
        start = time.perf_counter()
        optimizer.step()
        timed.append(time.perf_counter() - start)

    return step, timed


def deepcontext_ms(step: Callable[[], None], steps: int, name: str) -> float:
    with tempfile.TemporaryDirectory() as logdir:
        with Profiler(
            logdir=logdir,
            steps=StepRange(start=0, count=steps),
            cpu_sampling_hz=0,
            system_interval_ms=0,
        ) as prof:
            for _ in range(steps):
                step()
                prof.step()
        (profile,), _ = load_profiles(logdir)
        assert profile.env["capture"].startswith("native"), profile.env["capture"]
        tree = profile.tree
        # the optimizer phase holds zero_grad too: compare the step's own frame
        # (``SGD.step`` under the line that called it), as torch.profiler's record is the step
        incl = tree.inclusive("cpu_time_ns")
        nodes = [n for n in range(len(tree)) if tree.node_frame(n).name == f"{name}.step"]
        return sum(incl[n] for n in nodes) / steps / 1e6


def torch_profiler_ms(step: Callable[[], None], steps: int, name: str) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    (event,) = [e for e in prof.key_averages() if e.key == f"Optimizer.step#{name}.step"]
    return event.cpu_time_total / steps / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{'workload':28s} {'unprofiled ms':>14s} {'deepcontext ms':>15s} {'torch.profiler ms':>18s} {'ratio':>7s}"
    )
    workloads: dict[str, Any] = {
        "lightning demo Transformer": demo_transformer,
        "tiny BERT (AdamW)": tiny_bert,
    }
    for label, make in workloads.items():
        step, name, timed = make()
        for _ in range(2):
            step()  # warm
        ours, theirs, plain = [], [], []
        for _ in range(args.rounds):
            del timed[:]
            for _ in range(args.steps):
                step()
            plain.append(statistics.median(timed) * 1e3)
            ours.append(deepcontext_ms(step, args.steps, name))
            theirs.append(torch_profiler_ms(step, args.steps, name))
        p, a, b = statistics.median(plain), statistics.median(ours), statistics.median(theirs)
        print(f"{label:28s} {p:14.3f} {a:15.3f} {b:18.3f} {a / b:7.2f}")
    print(
        "ratio: DeepContext's optimizer step (the <Class>.step frame) over torch.profiler's record; target within x1.2"
    )


if __name__ == "__main__":
    main()
