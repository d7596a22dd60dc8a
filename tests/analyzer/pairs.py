"""Planted problems run before and after their fix, in back-to-back pairs.

Both sides of a pair leave out the time the host gave to other work: the
findings' savings are scaled to the step's own running time, and the measured
saving is the change of the mean step less its wait for a CPU. A shared 2-core
machine also drifts: the same loop runs 1.5x slower in one second than in the
next, as much as some fixes save. So a problem runs as `PAIRS` pairs, and the
median of their ratios (measured saving over estimate) is what counts: a pair
is two adjacent runs, which drift together. `tests/analyzer/test_gains.py`
judges them; `benchmarks/gains.py` prints them."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dc_core.cli import main
from dc_core.store.profile import Profile

PAIRS = 5


@dataclass
class Pair:
    """One before/after pair: both profiles, the finding of ``rule`` in each."""

    before: Profile
    after: Profile
    found: list[dict[str, Any]]  # the rule's findings before the fix
    left: list[dict[str, Any]]  # ... and after it, its warnings
    saved_ns: float  # per step, as `deepcontext diff` measures it

    @property
    def gain_ns(self) -> float:
        return self.found[0]["gain_ns"] if self.found else 0.0


def measured_saving(before: Profile, after: Profile) -> float:
    """ns per step the fix saved, as ``deepcontext diff before after --json``
    says: the change of the mean step less its wait for a CPU, which a loaded
    host puts in either run (the findings' savings leave it out too)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diff", before.source, after.source, "--json"]) == 0
    delta = json.loads(out.getvalue())["step_delta_running_ns"]
    assert delta is not None  # Linux says how long a thread waited
    return -delta


@contextlib.contextmanager
def one_cpu() -> Iterator[None]:
    """Both runs of a pair on the CPU this process is on: moved between a
    shared machine's CPUs, the same optimizer step took 7.5 ms in one run and
    12.4 ms in the next."""
    allowed = os.sched_getaffinity(0)
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: the CPU it last ran on
    os.sched_setaffinity(0, {cpu} if cpu in allowed else allowed)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def run_pairs(
    root: Path, run: Callable[[Path, bool], Profile], rule: str, pairs: int = PAIRS
) -> Iterator[Pair]:
    """Run ``run`` before and after its fix ``pairs`` times, under ``root``."""
    for n in range(pairs):
        with one_cpu():
            before, after = run(root / f"before{n}", False), run(root / f"after{n}", True)
        # after the fix a note may stay where the host starved it (the load may be all of it): no warning
        yield Pair(
            before,
            after,
            [f for f in before.findings if f["rule"] == rule],
            [f for f in after.findings if f["rule"] == rule and f["severity"] != "info"],
            measured_saving(before, after),
        )


def problems(framework: str) -> dict[str, tuple[Callable[[Path, bool], Profile], str, str]]:
    """name -> (runner, the rule that must find it, a frame its path names)."""
    if framework == "torch":
        from tests.analyzer import fixes
    else:
        from tests.analyzer import jax_fixes as fixes
    return fixes.PROBLEMS
