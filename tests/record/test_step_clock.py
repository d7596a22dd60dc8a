"""A step's time and its wait for a CPU, with a framework's one-offs kept out of both."""

from __future__ import annotations

import pytest

from dc_core.record import step_clock
from dc_core.record.step_clock import StepClock

MS = 1_000_000


class Scopes:
    """The collector as the step clock uses it, with no scope of its own open."""

    def depth(self) -> int:
        return 0

    def unwind(self, depth: int) -> None:
        pass

    def enter(self, *args) -> None:
        pass

    def mark_step(self) -> None:
        pass


@pytest.mark.parametrize(
    ("compiled_ms", "kept_wait_ms"),
    [(0, 50), (80, 10)],  # 100 ms a step, 50 of them waiting for a CPU
)
def test_a_compiles_share_of_the_steps_wait_goes_with_it(monkeypatch, compiled_ms, kept_wait_ms):
    """JAX compiling inside a step is reported apart (``step_overhead_ns``),
    not as step time; the step's wait, read at its edges, loses the same
    share. Kept whole, an eager scan's 22 ms step left after compiling read a
    63 ms wait under load: a running time below zero."""
    now, waited = [0], [0]
    monkeypatch.setattr(step_clock, "run_queue_wait_ns", lambda: waited[0])
    clock = StepClock(lambda: now[0])
    scopes = Scopes()
    clock.open_window()
    clock.begin(scopes, phase=1, step=0)
    now[0], waited[0] = 100 * MS, 50 * MS
    clock.end(scopes, compiled_ms * MS, step=0)
    fields = clock.profile_fields()
    assert fields["step_times_ns"] == [(100 - compiled_ms) * MS]
    assert fields["step_wait_ns"] == [kept_wait_ms * MS]
