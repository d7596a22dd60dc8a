"""When windows open and close: step ranges or time ranges, as pure logic."""

from __future__ import annotations

from .config import StepRange, TimeRange


class WindowSchedule:
    """Decides at step boundaries whether a window opens or closes.

    Step ranges are decided by step number alone; a time range by the clock
    (``now`` in monotonic ns, passed in so tests can use a fake clock).
    """

    def __init__(self, steps: StepRange, time_range: TimeRange | None, start_ns: int) -> None:
        self.steps = steps
        self.time_range = time_range
        self.start_ns = start_ns
        self._time_window_done = False
        self._cut = False  # the open time range ends at the next step end, however long it ran
        self._current: tuple[int, int] | None = None
        self._next_start = steps.start  # cheap first test for the hot path
        self._skipped_until = 0  # steps of a skipped window are not opened again
        self.skips = 0  # windows the adapter skipped (`skip`)

    def describe(self) -> str:
        """The windows planned, in words: ``steps 5–7, then every 100 steps``."""
        if self.time_range is not None:
            r = self.time_range
            return (
                f"a window {r.start_after_s:g} s after the profiler started, for {r.duration_s:g} s"
            )
        s = self.steps
        return f"steps {s.start}–{s.start + s.count - 1}" + (
            f", then every {s.every} steps" if s.every else ""
        )

    def may_open(self, step: int) -> bool:
        """Fast pre-check outside a window: False means certainly no window now."""
        if self.time_range is not None:
            return not self._time_window_done
        return step >= self._next_start

    def open_at(self, step: int, now: int) -> tuple[int, int] | None:
        """The window opening at ``step`` (start, planned end_exclusive), or None
        (also inside a window that was skipped)."""
        if step < self._skipped_until:
            return None
        if self.time_range is not None:
            elapsed_s = (now - self.start_ns) / 1e9
            if self._time_window_done or elapsed_s < self.time_range.start_after_s:
                return None
            self._current = (step, step + 1)
            return self._current
        window = self.steps.window_of(step)
        if window is None:
            self._advance(step)
            return None
        self._current = (step, window[1])  # a window entered late still ends on time
        return self._current

    def should_close(self, step: int, now: int, opened_ns: int) -> bool:
        """Whether the window closes after ``step`` ends."""
        if self._current is None:
            return True
        if self.time_range is not None:
            if self._cut or (now - opened_ns) / 1e9 >= self.time_range.duration_s:
                self._time_window_done = True
                self._current = None
                return True
            return False
        if step + 1 >= self._current[1]:
            self._current = None
            self._advance(step + 1)
            return True
        return False

    def skip(self, window: tuple[int, int]) -> bool:
        """``window`` (as `open_at` gave it) is not recorded: its steps are
        not opened again. True for the first window skipped."""
        self._skipped_until = window[1]
        self.skips += 1
        return self.skips == 1

    def cut(self) -> None:
        """End the open time range at the next step end, before its duration."""
        self._cut = self.time_range is not None and self._current is not None

    def _advance(self, step: int) -> None:
        """Move the fast pre-check to the first step at or after ``step`` inside a window."""
        self._next_start = self.steps.next_active(step)
