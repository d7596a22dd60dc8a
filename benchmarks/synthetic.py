"""Realistic rank profiles for the scale benchmarks, written with the project's own writer.

A GPT-shaped window (phases → train loop line → model line → 12 blocks × 4
submodules × 3 source lines × 3 operators → kernel, backward under its own
lines, DDP's all-reduce in backward, an optimizer and a dataloader): about
2,000 nodes. Ranks differ by seeded noise; one planted slow rank does 4× the
work in one MLP, and the others wait for it in their all-reduce, so that step
times stay equal (synchronous training) while compute does not. One planted
node regresses from a given window on: each window adds its original cost
once more (a cache or a list growing with the run).

Usage: ``python benchmarks/synthetic.py LOGDIR --ranks 1024 [--windows N]``, or
from a benchmark::

    from synthetic import write_run
    write_run(logdir, ranks=1024, windows=1)
"""

from __future__ import annotations

import random
from pathlib import Path

from dc_core.model.tree import Frame, Tree
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

OPS = (
    "aten::linear",
    "aten::softmax",
    "aten::layer_norm",
    "aten::gelu",
    "aten::add",
    "aten::view",
    "aten::transpose",
    "aten::bmm",
    "aten::dropout",
    "aten::mul",
    "aten::copy_",
    "aten::matmul",
)
SUBMODULES = (("attn", "Attention"), ("mlp", "MLP"), ("ln_1", "LayerNorm"), ("ln_2", "LayerNorm"))
LAYERS = 12
#: The planted slow rank's extra work, and the node that regresses across windows.
SLOW_MODULE = "transformer.h.5.mlp"
SLOW_FACTOR = 4.0
REGRESS_MODULE = "transformer.h.7.attn"
REGRESS_OP = "aten::softmax"
REGRESS_GROWTH = 1.0  # the original cost added per window
STEPS_PER_WINDOW = 2


def _ops(layer: int, sub: str, line: int) -> tuple[str, ...]:
    """Three operators per source line, fixed per position (the same on every rank)."""
    pick = random.Random(f"{layer}.{sub}.{line}")
    ops = pick.sample(OPS, 3)
    if f"transformer.h.{layer}.{sub}" == REGRESS_MODULE and line == 1:
        ops[0] = REGRESS_OP
    return tuple(ops)


def rank_profile(
    rank: int,
    world: int,
    window: int = 0,
    *,
    slow_rank: int | None = None,
    regress_from: int | None = None,
    seed: int = 0,
    step_start: int = 10,
    every: int = 100,
) -> Profile:
    """One rank's window ``window`` (0-based) of a run of ``world`` ranks.

    Args:
        slow_rank: The rank doing `SLOW_FACTOR` × the work in `SLOW_MODULE`.
        regress_from: First window in which `REGRESS_OP` under `REGRESS_MODULE` grows.
        every: Steps between window starts.
    """
    rng = random.Random(f"{seed}.{rank}.{window}")
    tree = Tree()

    def noise() -> float:
        return rng.uniform(0.93, 1.07)

    compute = 0
    for phase in ("forward", "backward"):
        p = tree.child(0, Frame("phase", phase))
        loop = tree.child(p, Frame("python", "train", "train.py", 40 if phase == "forward" else 41))
        model = tree.child(loop, Frame("python", "forward", "model.py", 120))
        for layer in range(LAYERS):
            block = tree.child(model, Frame("module", f"transformer.h.{layer}", detail="Block"))
            for sub, cls in SUBMODULES:
                name = f"transformer.h.{layer}.{sub}"
                module = tree.child(block, Frame("module", name, detail=cls))
                scale = SLOW_FACTOR if rank == slow_rank and name == SLOW_MODULE else 1.0
                for line in range(3):
                    src = tree.child(
                        module,
                        Frame(
                            "python",
                            "forward",
                            "model.py",
                            60 + 10 * SUBMODULES.index((sub, cls)) + line,
                        ),
                    )
                    for op in _ops(layer, sub, line):
                        grow = 1.0
                        if (
                            regress_from is not None
                            and window >= regress_from
                            and name == REGRESS_MODULE
                            and op == REGRESS_OP
                        ):
                            grow = 1 + REGRESS_GROWTH * (window - regress_from + 1)
                        node = tree.child(src, Frame("operator", op, backward=phase == "backward"))
                        cpu = int(
                            40_000 * (2 if phase == "backward" else 1) * scale * grow * noise()
                        )
                        kernel = tree.child(
                            node, Frame("kernel", f"cpu_{op[6:]}_kernel", detail="cpu")
                        )
                        tree.add(node, "cpu_time_ns", cpu // 4)
                        tree.add(node, "count", STEPS_PER_WINDOW)
                        tree.add(kernel, "cpu_time_ns", cpu - cpu // 4)
                        compute += cpu
    optimizer = tree.child(0, Frame("phase", "optimizer"))
    step = tree.child(optimizer, Frame("python", "step", "torch/optim/adamw.py", 210))
    for op in (
        "aten::_foreach_mul_",
        "aten::_foreach_add_",
        "aten::_foreach_addcdiv_",
        "aten::_foreach_sqrt",
    ):
        node = tree.child(step, Frame("operator", op))
        value = int(300_000 * noise())
        tree.add(node, "cpu_time_ns", value)
        tree.add(node, "count", STEPS_PER_WINDOW)
        compute += value
    loader = tree.child(0, Frame("phase", "dataloader"))
    batch = tree.child(loader, Frame("python", "__next__", "torch/utils/data/dataloader.py", 630))
    value = int(500_000 * noise())
    tree.add(batch, "cpu_time_ns", value)
    compute += value
    # Synchronous data parallel: every rank's all-reduce lasts until the slowest
    # rank arrives, so the others' wait is the slow rank's extra work.
    # (3 lines x 3 operators, forward 40 us + backward 80 us each)
    slow_extra = 0 if slow_rank is None else int(9 * 120_000 * (SLOW_FACTOR - 1))
    own_extra = slow_extra if rank == slow_rank else 0
    backward = tree.find("backward")
    reducer = tree.child(
        backward, Frame("python", "_sync_params", "torch/nn/parallel/distributed.py", 1500)
    )
    allreduce = tree.child(reducer, Frame("operator", "c10d::allreduce_", backward=True))
    wait = int(200_000 * noise()) + slow_extra - own_extra
    tree.add(allreduce, "cpu_time_ns", wait)
    tree.add(allreduce, "count", STEPS_PER_WINDOW * 4)
    start = step_start + window * every
    step_ns = (compute + wait) // STEPS_PER_WINDOW
    return Profile(
        tree=tree,
        steps=(start, start + STEPS_PER_WINDOW),
        step_times_ns=[int(step_ns * rng.uniform(0.99, 1.01)) for _ in range(STEPS_PER_WINDOW)],
        rank=rank,
        host=f"node{rank // 8:04d}",
        framework="pytorch",
        world_size=world,
        env={"capture": "native"},
        start_unix_ns=1_700_000_000_000_000_000 + start * 10**8,
        duration_ns=compute + wait,
    )


def write_run(
    logdir: str | Path,
    ranks: int,
    windows: int = 1,
    run: str = "bench",
    *,
    slow_rank: int | None = None,
    regress_from: int | None = None,
    seed: int = 0,
) -> int:
    """Write ``ranks`` × ``windows`` profiles under ``logdir/run``; returns the number written."""
    for window in range(windows):
        for rank in range(ranks):
            write_profile(
                rank_profile(
                    rank, ranks, window, slow_rank=slow_rank, regress_from=regress_from, seed=seed
                ),
                logdir,
                run,
            )
    return ranks * windows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="write a synthetic run of many ranks and windows")
    parser.add_argument("logdir")
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--run", default="gpt-ddp")
    parser.add_argument(
        "--slow-rank", type=int, default=None, help="default: 5/7 of the way through the ranks"
    )
    parser.add_argument(
        "--regress-from", type=int, default=None, help="window from which a node regresses"
    )
    args = parser.parse_args()
    slow = args.ranks * 5 // 7 if args.slow_rank is None else args.slow_rank
    count = write_run(
        args.logdir,
        args.ranks,
        args.windows,
        args.run,
        slow_rank=slow,
        regress_from=args.regress_from,
    )
    print(f"{count:,} profiles under {args.logdir}/{args.run}; planted slow rank {slow}")


if __name__ == "__main__":
    main()
