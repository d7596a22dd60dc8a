"""The words for a step window, one place for every reader: its steps as text,
its label (and whether it ended early), and the one-off cost of a process's
first step. Pure functions of a window's steps and step times."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.profile import Profile

#: A process's first step holds one-off costs (imports, first calls, the
#: allocator's and JIT's warm-up) when it took this many times the median of
#: the window's other steps, and at least `ONE_OFF_MIN_NS` more: a CNN's first
#: step took 390 ms against 13-80 ms for the next five.
ONE_OFF_RATIO = 3.0
ONE_OFF_MIN_NS = 20_000_000


def steps_text(steps: tuple[int, int]) -> str:
    """Human text of a half-open step range, inclusive: ``(5, 8)`` → ``steps 5–7``."""
    first, end = steps
    last = max(first, end - 1)
    return f"step {first}" if last == first else f"steps {first}\u2013{last}"


def window_label(
    steps: tuple[int, int], step_times: Sequence[int] = (), planned: tuple[int, int] | None = None
) -> str:
    """``steps 5–7``, or for a window that ended early
    ``steps 5–6 (partial: step 5 timed, of steps 5–7 planned)``.

    The range is the steps the file covers (the last one may have begun and
    not ended: a loop that stops inside a window). ``planned`` is the window
    the writer planned (`Profile.planned_window`); without it the note counts
    against the steps in the range; without step times nothing is said.
    """
    text = steps_text(steps)
    total = (planned[1] - planned[0]) if planned else steps[1] - steps[0]
    timed = len(step_times)
    if step_times and timed < total:
        # by step numbers throughout, as the range itself is written (never a count beside a number)
        timed_steps = steps_text((steps[0], steps[0] + timed))
        text += f" (partial: {timed_steps} timed" + (
            f", of {steps_text(planned)} planned)" if planned else ")"
        )
    return text


def profile_label(profile: Profile) -> str:
    """`window_label` of a profile's own steps."""
    return window_label(profile.steps, profile.step_times_ns, profile.planned_window)


def one_off_first_step(profile: Profile) -> int:
    """ns the window's first step took above the median of its other steps,
    when that step was the first its process ran and took `ONE_OFF_RATIO`
    times as long: what a first step pays once. 0 otherwise."""
    times = profile.step_times_ns
    if len(times) < 3 or profile.first_step != profile.steps[0]:
        return 0
    rest = statistics.median(times[1:])
    excess = times[0] - rest
    return int(excess) if times[0] >= ONE_OFF_RATIO * rest and excess >= ONE_OFF_MIN_NS else 0
