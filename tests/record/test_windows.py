"""Window scheduling by steps and by time, with a fake clock."""

from __future__ import annotations

from dc_core.record.config import StepRange, TimeRange
from dc_core.record.windows import WindowSchedule


def drive(
    schedule: WindowSchedule, steps: int, clock=lambda step: step * 1_000_000_000
) -> list[tuple[int, int]]:
    """Run ``steps`` steps; return the (first, last) steps of each window seen."""
    windows, current = [], None
    for step in range(steps):
        now = clock(step)
        if current is None and schedule.may_open(step) and schedule.open_at(step, now):
            current = [step, step, now]
        if current is not None:
            current[1] = step
            if schedule.should_close(step, clock(step) + 500_000_000, current[2]):
                windows.append((current[0], current[1]))
                current = None
    return windows


def test_step_windows_are_exact():
    assert drive(WindowSchedule(StepRange(start=5, count=3), None, 0), 20) == [(5, 7)]


def test_repeated_windows():
    schedule = WindowSchedule(StepRange(start=0, count=2, every=4, repeat=3), None, 0)
    assert drive(schedule, 20) == [(0, 1), (4, 5), (8, 9)]


def test_fast_precheck_skips_until_next_window():
    schedule = WindowSchedule(StepRange(start=3, count=1, every=10, repeat=0), None, 0)
    drive(schedule, 5)
    assert not schedule.may_open(5) and not schedule.may_open(12)
    assert schedule.may_open(13)


def test_time_range_with_fake_clock():
    # steps take 1 s each; open after 2.5 s, last 2 s
    schedule = WindowSchedule(StepRange(), TimeRange(start_after_s=2.5, duration_s=2.0), 0)
    assert drive(schedule, 12) == [(3, 5)]  # opens at 3 s, closes once 2 s have passed
    assert not schedule.may_open(11)  # a time range profiles once


def test_a_cut_time_range_closes_at_the_next_step_end():
    schedule = WindowSchedule(StepRange(), TimeRange(start_after_s=0, duration_s=600), 0)
    schedule.cut()  # nothing open yet: nothing to cut
    assert schedule.open_at(0, 0) == (0, 1)
    assert not schedule.should_close(0, 10**9, 0)
    schedule.cut()
    assert schedule.should_close(1, 2 * 10**9, 0)  # 2 s of a 600 s range
    assert not schedule.may_open(2)  # and it does not open again


def test_a_step_range_is_not_cut():
    schedule = WindowSchedule(StepRange(start=0, count=3), None, 0)
    assert schedule.open_at(0, 0) == (0, 3)
    schedule.cut()
    assert not schedule.should_close(0, 0, 0) and schedule.should_close(2, 0, 0)
