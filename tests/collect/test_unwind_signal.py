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
import time

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


def cpu_ns(tid: int) -> int:
    """A thread of this process's CPU time so far."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def test_the_sampler_sleeps_while_a_thread_it_signalled_cannot_answer(c):
    """A target that cannot run the handler (here: the signal blocked) makes
    every request wait out its 2 ms bound. The sampler sleeps through it: a
    sampler that spun or yielded there took the core the target needed on a
    small host, and came back a scheduler slice (4 ms) late."""
    phase = c.enter([c.intern(_native.KIND_PHASE, "forward")], 0, False, 0)
    before = set(os.listdir("/proc/self/task"))
    signal.pthread_sigmask(signal.SIG_BLOCK, [SIGNAL])
    try:
        c.start_sampler(400, native=True)  # a 2.5 ms period: most of it spent waiting
        (sampler,) = {int(t) for t in set(os.listdir("/proc/self/task")) - before}
        cpu0, wall0 = cpu_ns(sampler), time.monotonic_ns()
        compress_until_sampled(c, phase, 200, DATA, deadline_s=30)
        cpu, wall = cpu_ns(sampler) - cpu0, time.monotonic_ns() - wall0
        c.stop_sampler()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [SIGNAL])
    c.exit()
    below = unwound(c, phase)
    total = below + decode(c)[1]["metrics"]["samples"][phase]
    # every sample kept, none unwound; the sampler ran for a small part of
    # the time it waited (spinning, its CPU time was most of the wall time)
    assert total >= 200 and below == 0, (total, below)
    assert cpu < 0.2 * wall, (cpu, wall)
