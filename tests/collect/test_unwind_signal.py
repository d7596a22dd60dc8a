"""The native sampler's unwind signal beside other code's signal handlers.

Regression: Lightning's trainer, when a fit ends, sets every signal back to
the handler Python recorded for it at start-up (SIG_DFL for the one the
sampler unwinds threads with). The sampler then signalled with SIGPROF,
whose default action ends the process: the suite's pytest died "Profiling
timer expired" at the first comprehensive window after Lightning's demo.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.collect.test_native import _below, compress_until_sampled, decode

_native = pytest.importorskip("dc_core._native")

#: The unwinder's signal: its default action is to ignore it.
SIGNAL = signal.SIGURG
DATA = os.urandom(1 << 16) * 16  # 1 MiB that deflate cannot shortcut


@pytest.fixture
def c():
    made = _native.Collector()
    yield made
    made.stop_sampler()


def unwound(c, phase: int) -> int:
    """Samples below ``phase`` (their native stacks unwound)."""
    paths, s = decode(c)
    return sum(s["metrics"]["samples"][n] for n in _below(s, phase))


def sampled(c, samples: int, least_unwound: int) -> tuple[int, int]:
    """Compress under a phase with the native sampler on: (samples, unwound)."""
    phase = c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
    c.start_sampler(200, native=True)
    compress_until_sampled(c, phase, samples, DATA, deadline_s=30, unwound=least_unwound)
    c.stop_sampler()
    c.exit()
    paths, s = decode(c)
    total = s["metrics"]["samples"][phase] + unwound(c, phase)
    return total, unwound(c, phase)


def installed() -> None:
    """The unwinder's handler in place, as after any earlier native window."""
    warm = _native.Collector()
    sampled(warm, 5, 0)


def test_regression_a_handler_reset_to_default_ends_nothing_and_ours_comes_back(c):
    installed()
    previous = signal.signal(SIGNAL, signal.SIG_DFL)  # as Lightning's teardown does
    try:
        total, below = sampled(c, 40, 10)
    finally:
        signal.signal(SIGNAL, previous)
    # the process lives, and native stacks are unwound again: our handler went back in
    assert total >= 40 and below >= 10, (total, below)


def test_a_handler_of_someone_elses_gets_none_of_our_signals(c):
    installed()
    calls = []
    previous = signal.signal(SIGNAL, lambda signum, frame: calls.append(signum))
    try:
        total, below = sampled(c, 40, 0)
    finally:
        signal.signal(SIGNAL, previous)
    # samples still count, at the thread's node, without native stacks
    assert total >= 40 and below == 0 and calls == [], (total, below, calls)
