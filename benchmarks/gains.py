"""What each planted problem's fix saves, against what its finding estimated.

Each problem of `tests/analyzer/fixes.py` (PyTorch) and
`tests/analyzer/jax_fixes.py` (JAX) runs before and after its fix in
back-to-back pairs, both runs of a pair on one CPU; the measured saving is
`deepcontext diff`'s ``step_delta_running_ns``. Printed: a Markdown table,
ms per step of the median pair, and each pair's measured / estimated (the
suite's `test_gains.py` asks the median to be within 0.6-1.4).

    python benchmarks/gains.py [--pairs 5] [--only optimizer,jax_loop]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import warnings
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.analyzer.pairs import PAIRS, problems, run_pairs  # noqa: E402  (after the path is set)

LABELS = {
    "dtype": "float64 inputs cast in every step → cast once",
    "optimizer": "Adam `foreach=False` on 600 tensors → `fused=True`",
    "dataloader": "`num_workers=0`, 2 ms per sample → 2 workers",
    "item": "a loss read with `.item()` per sample → once",
    "loop": "a Python loop over 600 rows → `h.sum(0)`",
    "norm": "LayerNorm by hand → `F.layer_norm`",
    "jax_dtype": "JAX: bfloat16 inputs cast in the jitted step → cast once",
    "jax_loop": "JAX: an eager Python loop over 150 rows → `lax.scan`",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--only", default="", help="comma-separated problem names (default: all)")
    args = parser.parse_args()
    chosen = set(filter(None, args.only.split(",")))
    # the fixed data loader's 2 workers share the pair's one CPU on purpose
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    print("| problem | rule | estimated | measured | measured / estimated |")
    print("| --- | --- | ---: | ---: | --- |")
    for framework in ("torch", "jax"):
        if importlib.util.find_spec(framework) is None:
            continue
        for name, (run, rule, _) in problems(framework).items():
            if chosen and name not in chosen:
                continue
            with tempfile.TemporaryDirectory() as root:
                pairs = [p for p in run_pairs(Path(root), run, rule, args.pairs) if p.found]
            if not pairs:
                print(f"| {LABELS.get(name, name)} | `{rule}` | not found | | |")
                continue
            ratios = [p.saved_ns / p.gain_ns for p in pairs]
            middle = sorted(pairs, key=lambda p: p.saved_ns / p.gain_ns)[len(pairs) // 2]
            print(
                f"| {LABELS.get(name, name)} | `{rule}` | {middle.gain_ns / 1e6:.2f} | "
                f"{middle.saved_ns / 1e6:.2f} | {', '.join(f'{r:.2f}' for r in ratios)} "
                f"(median {median(ratios):.2f}) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
