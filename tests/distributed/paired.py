"""A planted problem's window and its fix's timed steps, interleaved.

A test that checks a finding's saving against what its fix saves needs both
from the same stretch of a shared machine's load, which changes within
seconds. With one window in the middle and the timed steps before and after
it, a window under a heavier stretch estimated 212 ms where the steps
around it saved 86 (beside a run of the suite and a busy loop). Here the
profiled setting runs in `ROUNDS` windows of `WINDOW` steps, each after
`PAIRS` pairs of timed steps (each setting once, the profiled one first),
and `PAIRS` more close the run: each window's estimate and the pairs around
it see the same load. A test takes the median over the windows and over the
pairs (`planted_tops`, `steps_of`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROUNDS, PAIRS, WINDOW = 4, 2, 3


def windows_between_pairs(
    root: str,
    rank: int,
    settings: dict[str, Callable[[], None]],
    running_time: bool = False,
    **options: Any,
) -> None:
    """Step the first of ``settings`` (name -> one training step) in the
    windows, every setting in the timed pairs; the times go to
    ``steps-<rank>.json``, by setting, each pair's steps at the same index.
    ``running_time``: a timed step less its thread's wait for a CPU."""
    import dc_torch

    profiled = next(iter(settings.values()))
    times: dict[str, list[int]] = {name: [] for name in settings}
    steps = {"start": 2 * PAIRS, "count": WINDOW, "every": WINDOW + 2 * PAIRS, "repeat": ROUNDS}
    with dc_torch.profile(logdir=root, run="exposed", steps=steps, rank=rank, **options) as prof:
        for round_ in range(ROUNDS + 1):
            for _ in range(PAIRS):
                for name, step in settings.items():
                    start, waited = time.monotonic_ns(), cpu_wait_ns() if running_time else 0
                    step()
                    ns = time.monotonic_ns() - start
                    times[name].append(ns - (cpu_wait_ns() - waited if running_time else 0))
                    prof.step()
            if round_ < ROUNDS:
                for _ in range(WINDOW):
                    profiled()
                    prof.step()
    Path(root, f"steps-{rank}.json").write_text(json.dumps(times))


def cpu_wait_ns() -> int:
    """ns this thread has waited, runnable, for a CPU (schedstat's second field)."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1])


def planted_tops(script: Path, root: Path, ranks: int = 2) -> dict[int, list[dict]]:
    """Run a planted script (`spawn.profiled`, `ROUNDS` windows a rank): per
    rank, its windows' top findings, each the planted ``exposed_communication``."""
    from dc_core.analyzer import analyze
    from tests.distributed.spawn import profiled

    out: dict[int, list[dict]] = {}
    for p in profiled(script, root, ranks, windows=ROUNDS):
        top = analyze(p)[0]
        assert top["rule"] == "exposed_communication", top
        out.setdefault(p.rank, []).append(top)
    return out


def steps_of(root: Path, rank: int) -> dict[str, list[int]]:
    """The timed steps' ns by setting (`windows_between_pairs`)."""
    return json.loads((root / f"steps-{rank}.json").read_text())
