"""Ctrl-C landing anywhere in the profiler's code leaves torch as it was.

A trace function counts the lines the profiler runs (dc_core, dc_torch) while
a profiled loop opens a window, runs steps and closes; at the chosen line it
raises a real SIGINT, so the interrupt arrives the way a user's Ctrl-C does
(at the interpreter's next check, through whatever handler is installed).
Wherever it lands, the loop ends with KeyboardInterrupt (or completes, when
it landed after the last step), torch's global state is as before, no session
stays live, and every profile written is whole.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

import dc_core
import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles
from tests.reliability.workload import torch_state, train

OURS = tuple(os.path.dirname(m.__file__) + os.sep for m in (dc_core, dc_torch))
CASES = 40  # sampled, beside every line where a window opens or closes


#: Where a window opens and closes: every line of these is a case.
EDGES = {"__enter__", "__exit__", "start", "stop", "close", "_open", "_close_window"}
#: Where hooks go in and come out: sampled, with the rest of the profiler's lines.
HOOKING = {
    "_stop_collecting",
    "install",
    "uninstall",
    "restore",
    "_remove_modes",
    "_take_off",
    "_patch",
    "_unpatch",
    "_restore",
}


class InterruptAtLine:
    """``sys.settrace`` function: raise SIGINT at the ``k``-th line run in our
    function ``name`` (``at`` = (name, k); never, with ``at`` None). Records
    each line as (function, k) in ``lines``: a line's place is counted per
    function, so that one-off work elsewhere (caches filled in the first
    window, the analyzer's branches) cannot shift where the interrupt lands."""

    def __init__(self, at: tuple[str, int] | None) -> None:
        self.at, self.lines, self.seen = at, [], Counter()

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.startswith(OURS):
            return None  # no line events for frames outside our code
        if event == "line":
            name = frame.f_code.co_name
            k = self.seen[name]
            self.seen[name] = k + 1
            if (name, k) == self.at:
                signal.raise_signal(signal.SIGINT)
            self.lines.append((name, k))
        return self


def _profiled_loop(tmp_path, tracer: InterruptAtLine) -> str:
    sys.settrace(tracer)
    try:
        # windows at step 0 (opened inside ``__enter__``) and step 2 (inside ``step()``)
        with dc_torch.profile(
            logdir=str(tmp_path),
            steps=StepRange(start=0, count=1, every=2, repeat=2),
            cpu_sampling_hz=0,
            system_interval_ms=0,
        ) as prof:
            train(steps=3, profiler=prof)
    except KeyboardInterrupt:
        return "interrupted"
    finally:
        sys.settrace(None)
    return "completed"


@pytest.mark.keeps_no_accounts  # a Ctrl-C at any line of the profiler's own: the window it cuts is written as collected
def test_ctrl_c_anywhere_in_the_profiler_restores_torch(tmp_path):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = torch_state()
    # Two dry runs: the second leaves out what runs once per process (imports,
    # class bodies, first-use setup), where no later run could be interrupted.
    assert _profiled_loop(tmp_path / "warm", InterruptAtLine(None)) == "completed"
    dry = InterruptAtLine(None)
    assert _profiled_loop(tmp_path / "dry", dry) == "completed"
    rng = random.Random(11)
    edges = [line for line in dry.lines if line[0] in EDGES]
    hooking = [line for line in dry.lines if line[0] in HOOKING]
    points = sorted(
        set(edges + rng.sample(hooking, CASES // 2) + rng.sample(dry.lines, CASES // 2))
    )
    outcomes = []
    for at in points:
        logdir = tmp_path / f"{at[0]}-{at[1]}"
        outcomes.append(_profiled_loop(logdir, InterruptAtLine(at)))
        assert torch_state() == before, f"SIGINT at line {at[1]} run in {at[0]} left torch hooked"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        profiles, bad = load_profiles(logdir) if logdir.exists() else ([], [])
        assert not bad and {p.steps for p in profiles} <= {(0, 1), (2, 3)}
    assert outcomes.count("interrupted") >= len(points) - 2  # it reached the loop nearly every time


def test_ctrl_c_while_hooks_go_in_is_held_until_they_are_all_in(tmp_path):
    """Regression (issue 11 item 3): Ctrl-C inside ``__enter__`` left module and
    optimizer hooks active and the session live."""
    from dc_torch.adapter import TorchAdapter

    real = TorchAdapter.install
    seen = []

    def install_interrupted(self, session):
        signal.raise_signal(signal.SIGINT)  # arrives while the hooks go in
        real(self, session)
        # every hook of either capture path in: module hooks or the RecordFunction callback
        state = torch_state()
        seen.append(state["module hooks"] != [] or state["RecordFunction callback"])

    before = torch_state()
    TorchAdapter.install = install_interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            with dc_torch.profile(
                logdir=str(tmp_path),
                steps=StepRange(start=0, count=2),
                cpu_sampling_hz=0,
                system_interval_ms=0,
            ):
                pytest.fail("the body must not run: Ctrl-C was pressed while entering")
    finally:
        TorchAdapter.install = real
    assert seen == [True]  # installing completed before the interrupt was delivered
    assert torch_state() == before
