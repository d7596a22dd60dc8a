"""What the step clock reads of the CPU the process's other work waited for:
child processes (a DataLoader's workers) count, each from what it had waited
when the window opened."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dc_core.collect.sysmon import children_wait_ns
from dc_core.record.step_clock import StepClock

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux's /proc says how threads wait")

#: Spins for a second of its own CPU time: long whatever the load.
SPIN = "import time\nend = time.thread_time() + 1.0\nwhile time.thread_time() < end: pass\n"


def _two_on_one_cpu() -> list[subprocess.Popen]:
    """Two spinning children on one CPU: each waits for the other."""
    cpu = min(os.sched_getaffinity(0))
    return [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\n{SPIN}"])
            for _ in range(2)]


def test_children_that_share_a_cpu_are_seen_waiting_for_it():
    children = _two_on_one_cpu()
    try:
        while all(child.poll() is None for child in children):
            waits = children_wait_ns()
            if sum(waits.get(child.pid, 0) for child in children) > 200_000_000:
                break
        assert sum(waits.get(child.pid, 0) for child in children) > 200_000_000, waits
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_windows_others_wait_holds_its_childrens_wait():
    clock = StepClock(lambda: 0)
    clock.open_window()
    children = _two_on_one_cpu()
    try:
        while all(child.poll() is None for child in children):
            if sum(children_wait_ns().get(child.pid, 0) for child in children) > 200_000_000:
                break
        clock.close(_NoScopes())
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert clock.others_wait > 200_000_000


class _NoScopes:
    """A collector with nothing open (the window never began a step)."""

    def depth(self) -> int:
        return 0

    def unwind(self, depth: int) -> None:
        pass
