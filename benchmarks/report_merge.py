"""How long `deepcontext report` takes to merge many ranks.

Writes 64 synthetic rank files of a GPT-shaped tree (phases × Python lines ×
modules × operators × kernels, ~6k nodes each), rank 17's steps 1.3x longer,
and times the report: the cross-rank tree with its outliers (the default past
8 ranks), --json, and every rank's own tree (--ranks all), the peer. Target:
under 10 s each here.
"""

from __future__ import annotations

import contextlib
import io
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dc_core.cli import main
from dc_core.model.tree import Frame, Tree
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

OPS = [
    "aten::mm",
    "aten::addmm",
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
]


def gpt_tree(rng: random.Random, layers: int = 12) -> Tree:
    tree = Tree()
    for phase in ("forward", "backward", "optimizer", "dataloader"):
        p = tree.child(0, Frame("phase", phase))
        node = tree.child(p, Frame("python", "train", "train.py", 40))
        node = tree.child(node, Frame("python", "forward", "model.py", 120))
        for layer in range(layers):
            block = tree.child(node, Frame("module", f"transformer.h.{layer}", detail="Block"))
            for sub, cls in (
                ("attn", "Attention"),
                ("mlp", "MLP"),
                ("ln_1", "LayerNorm"),
                ("ln_2", "LayerNorm"),
            ):
                mod = tree.child(block, Frame("module", f"transformer.h.{layer}.{sub}", detail=cls))
                for line in range(3):
                    src = tree.child(mod, Frame("python", "forward", "model.py", 60 + line))
                    for op in rng.sample(OPS, 3):
                        o = tree.child(src, Frame("operator", op, backward=phase == "backward"))
                        tree.add(o, "cpu_time_ns", rng.randint(1_000, 200_000))
                        tree.add(o, "count", 3)
                        k = tree.child(o, Frame("kernel", f"{op[6:]}_kernel", detail="cpu"))
                        tree.add(k, "cpu_time_ns", rng.randint(1_000, 100_000))
    return tree


def main_bench(ranks: int = 64) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        tree = gpt_tree(rng)
        for rank in range(ranks):
            times = [int(rng.gauss(100e6, 5e6) * (1.3 if rank == 17 else 1.0)) for _ in range(3)]
            write_profile(
                Profile(
                    tree=tree,
                    steps=(5, 8),
                    step_times_ns=times,
                    rank=rank,
                    host=f"node{rank // 8}",
                    framework="torch",
                    world_size=ranks,
                ),
                tmp,
            )
        write_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in Path(tmp).rglob("*.pb"))
        timings = {}
        for label, argv in (
            ("table", ["report", tmp]),
            ("json", ["report", tmp, "--json"]),
            ("ranks all", ["report", tmp, "--ranks", "all"]),
        ):
            sink = io.StringIO()
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(sink):
                status = main(argv)
            timings[label] = time.perf_counter() - t0
            assert status == 0, f"report {label} failed"
            if label == "table":  # the cross-rank tree and its outliers
                rows = [line for line in sink.getvalue().splitlines() if line.startswith("\u2502")]
                assert rows and rows[0].split("\u2502")[1].strip() == "17", (
                    "the slow rank was not the top outlier"
                )
            if label == "ranks all":  # every rank's own tree, and the step-time comparison
                assert "slowest rank: 17" in sink.getvalue(), "the slow rank was not named"
    print(
        f"{ranks} rank files, {len(tree)} nodes each, {size / ranks / 1024:.0f} KiB each (written in {write_s:.2f} s)"
    )
    for label, seconds in timings.items():
        verdict = "ok" if seconds < 10 else "OVER the 10 s target"
        print(f"report ({label:<9}) of {ranks} ranks: {seconds:6.2f} s  ({verdict})")
    print(
        f"cross-rank table / per-rank trees (--ranks all): {timings['table'] / timings['ranks all']:.2f}x"
    )


if __name__ == "__main__":
    main_bench()
