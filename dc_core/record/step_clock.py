"""Where a window's time is: its steps' times, and the parts of a step that
run outside the phase it began in.

A step runs from its begin to the next step's begin: a trainer's own loop
between two steps (its logging, fetching the next batch) is phase ``other``
and counts in the earlier step. Once a step has made as many optimizer
updates as the step before it, the rest of it (a host read of the loss,
logging, a scheduler) is ``other`` too. A phase another thread runs for the
step (a backward it joins) is time the step's thread spent waiting: that
span is lent to the other thread's record (``Collector.lend``), so the wall
time is billed once.

Every span is read off the collector's own scopes as they close, by the
clock the tree was timed with, so the step times and the tree time the same
span: a preemption between two clock reads would split them.

Each step's end marks the collector's step bounds (`Collector.mark_step`),
and each step records how long its thread waited, runnable, for a CPU: what
the analyzer needs to tell a cost every step pays from one the machine added.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from threading import get_ident
from typing import Any

from dc_core.collect import collector as collector_mod
from dc_core.collect.collector import ROOT_NODE, WHOLE_STACK
from dc_core.collect.sysmon import loader_workers_times, run_queue_wait_ns, workers_wait_ns


class StepClock:
    """The step accounting of one session's window (the session drives it)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock  # the session's: a time range's step ended from another thread
        self.times: list[int] = []  # per step of the window, ns
        self.waits: list[int] = []  # per step: ns its thread waited for a CPU (empty: unknown)
        # ns the process's worker threads waited for a CPU in the window (-1: unknown)
        self.others_wait = -1
        self._others_from = -1  # ... their total when the window opened
        # ns the data loader's worker processes ran on a CPU and waited for
        # one in the window (-1: unknown), and how many there were at its end
        self.loader_cpu, self.loader_wait, self.loader_workers = -1, -1, 0
        # ... each one's (ran, waited) when the window opened
        self._loader_from: dict[int, tuple[int, int]] | None = None
        # the step thread's run-queue wait when its step (or the loop after it) began
        self._wait_ns = -1
        self.thread = 0  # the thread that drives the steps
        self.step = -1  # the step begun (or ended) last in a window
        self._start_ns = 0  # the step running began (session clock)
        # per step of the window: when it began (session clock), 8 bytes a step
        self.begins = array("q")
        self._open = False  # a step begun and not ended
        self._between_ns: int | None = (
            None  # a trainer's loop between two steps, since (session clock)
        )
        self._lent_from: dict[
            int, list[int]
        ] = {}  # phases other threads run for the step: their starts
        self._updates = 0  # optimizer updates of the step running
        self._updates_per_step = 1  # ... and of the last one ended
        self._tail = False  # the step's updates are done: the rest of it is `other`

    def open_window(self) -> None:
        """A window opens: its steps are timed afresh."""
        self.times, self.waits = [], []
        self.others_wait, self._others_from = -1, workers_wait_ns()
        self.loader_cpu, self.loader_wait, self.loader_workers = -1, -1, 0
        self._loader_from = loader_workers_times()
        self.begins = array("q")

    def begin(self, c: Any, phase: int, step: int) -> None:
        """Step ``step`` begins on this thread, in phase frame ``phase``."""
        self.step = step
        # on the thread that opened them, before it changes
        between = self._close_scopes(c, self._between_ns)
        self.thread = get_ident()
        self._updates, self._tail = 0, False
        self._open = True
        if self._between_ns is not None and self.times:
            self.times[-1] += between  # a step runs to the next
            self._add_wait()
        if self._between_ns is None or not self.waits:
            self._wait_ns = run_queue_wait_ns()
        self._between_ns = None
        self._start_ns = self.clock()
        self.begins.append(self._start_ns)
        c.enter([phase], ROOT_NODE, False, WHOLE_STACK)

    def end(self, c: Any, overhead_ns: int, step: int) -> None:
        """Step ``step`` ends; ``overhead_ns`` of it were the framework's one-offs
        (JAX compiling a new shape), reported as a phase of their own, not step
        time, and so is their share of the step's wait for a CPU: its waits
        are read at the step's edges only, and a loaded host spreads them over
        the step (an eager ``lax.scan`` compiled each step under four spinners
        waited 63 ms a step for a 22 ms step left after 130 ms of compiling)."""
        elapsed = self._close_scopes(c, self._start_ns if self._open else None)
        self.times.append(max(elapsed - overhead_ns, 0))
        if len(self.waits) == len(self.times) - 1:
            self.waits.append(0)
            self._add_wait()
            if self.waits and 0 < overhead_ns and 0 < elapsed:
                self.waits[-1] = self.waits[-1] * self.times[-1] // elapsed
        c.mark_step()
        self._open = False
        if self._updates:
            self._updates_per_step = self._updates
        self.step = step

    def between(self, c: Any, other: int) -> None:
        """The window stays open after a step ended: the loop until the next
        step begins is phase frame ``other``."""
        c.enter([other], ROOT_NODE, False, WHOLE_STACK)
        self._between_ns = self.clock()

    def update_end(self, c: Any, other: int) -> None:
        """An optimizer update ended on the step's thread."""
        self._updates += 1
        if not self._tail and self._updates >= self._updates_per_step and c.depth() == 1:
            self._tail = True
            # On top of the step's scope, not in its place: no instant between
            # the two goes untimed, and the step's end closes both.
            c.enter([other], ROOT_NODE, False, WHOLE_STACK)

    def phase_entered(self) -> None:
        """A phase was entered on this thread: on another thread than the
        step's, work done for the step while the step's thread waits."""
        thread = get_ident()
        if self.thread and thread != self.thread:
            self._lent_from.setdefault(thread, []).append(collector_mod.now_ns())

    def phase_left(self, c: Any) -> None:
        """A phase was left on this thread: the step's thread waited for it meanwhile."""
        starts = self._lent_from.get(get_ident())
        if starts:
            c.lend(self.thread, starts.pop(), collector_mod.now_ns())

    def close(self, c: Any) -> None:
        """The window closes (its loop stopped, the process ends, the profiler
        failed), maybe mid-step: the time since the last step ended, which the
        tree holds, is that step's; with no step ended, it is the one step."""
        since = (
            self._between_ns
            if self._between_ns is not None
            else self._start_ns
            if self._open
            else None
        )
        rest = self._close_scopes(c, since)
        if since is not None:
            if self.times:
                self.times[-1] += rest
            else:
                self.times.append(rest)
                self.waits.append(0)
            self._add_wait()
        self._between_ns, self._open = None, False
        self._lent_from.clear()
        now = workers_wait_ns()
        self.others_wait = now - self._others_from if now >= 0 and self._others_from >= 0 else -1
        # a worker started in the window ran and waited all of its time in it;
        # one that ended in it is gone with its counters (left out)
        before, after = self._loader_from, loader_workers_times()
        if before is not None and after is not None:
            self.loader_cpu, self.loader_wait = (
                sum(max(t[i] - before.get(pid, (0, 0))[i], 0) for pid, t in after.items())
                for i in (0, 1)
            )
            self.loader_workers = len(after)

    def profile_fields(self) -> dict[str, Any]:
        """What the window's profile says of its steps: their times, their
        threads' waits for a CPU (none unless known for every step), the
        worker threads' and the data loader's worker processes'."""
        waits = self.waits if len(self.waits) == len(self.times) else []
        return {
            "step_times_ns": self.times,
            "step_wait_ns": waits,
            "others_wait_ns": self.others_wait,
            "loader_wait_ns": self.loader_wait,
            "loader_cpu_ns": self.loader_cpu,
            "loader_workers": self.loader_workers,
        }

    def _add_wait(self) -> None:
        """Add the step thread's run-queue wait since the last reading to the
        last step (on that thread only: the counter is per thread); an unknown
        reading leaves the window without waits."""
        if not self.waits or get_ident() != self.thread:
            return
        now = run_queue_wait_ns()
        if now < 0 or self._wait_ns < 0:
            self.waits = []
            return
        self.waits[-1] += now - self._wait_ns
        self._wait_ns = now

    def _close_scopes(self, c: Any, since: int | None) -> int:
        """Close this thread's scopes; the time the outermost one (the step's,
        or the loop's between two steps) spanned. Another thread than the
        step's (a time range's step, ended from the main thread) times from ``since``."""
        if c.depth() == 0 or get_ident() != self.thread:
            c.unwind(0)
            return max(self.clock() - since, 0) if since is not None else 0
        c.unwind(1)
        return max(c.exit(), 0)
