"""A JAX window's host time, placed at the Python that spent it.

The step's thread spends its time dispatching jitted functions (an eager op
is one) and running the Python between those calls. The trace says when each
dispatch ran and which program it launched; the program's ops say where in
the user's code it was called (their frames, from the stacks JAX kept when
it traced them). So, on the thread that dispatched most:

* a dispatch's time goes to the program it launched: an eager op's own
  operator node; for a program of many ops, the frames all of them share
  (the line that called the jitted function), in the phase they share, else
  in the phase the host was in;
* the time between two dispatches of one step goes to the deepest node both
  hang from below their phase; where they share nothing there, to the
  outermost frame of the one before, failing that of the one after (the
  collector's rule for the time between two operators);
* what no dispatch locates stays with the phase the step was in: the loop's
  own Python, and a dispatch that compiled (compiling is a phase of its own).

Each span moved is taken off the host phase it was timed in, so the phases
still add up to the steps.

Limitation: JAX caches an eager op's program by its shapes and dtypes, so
its frames are those of the first call that compiled it; later calls of the
same op on other lines land there too.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dc_jax.trace import Dispatch

Frames = tuple[int, ...]  # frame ids from the phase down


@dataclass(frozen=True)
class Target:
    """Where a program's dispatch time goes: ``frames`` from its phase down,
    ending at its operator (``is_op``) or at the frames its ops share."""

    frames: Frames
    is_op: bool
    located: bool = True  # its ops have frames of the user's code (not only their program's name)

    def hung_from(self) -> Frames:
        """The frames a call of it hangs from: an operator's parent, else itself."""
        return self.frames[:-1] if self.is_op else self.frames


@dataclass(frozen=True)
class Move:
    """``ns`` of host time in step ``step`` go from host phase frame ``host`` to ``frames``."""

    frames: Frames
    host: int
    step: int
    ns: int


def program_target(
    placed: Sequence[Frames], host_phase: int, located: bool = True
) -> Target | None:
    """The target of a program whose ops were placed at ``placed`` (each
    ``(phase, *context, operator)``; ``located``: the context holds frames of
    the user's code); None where they share no frame."""
    distinct = set(placed)
    if len(distinct) == 1:
        return Target(next(iter(distinct)), True, located)
    contexts = [f[1:-1] for f in distinct]
    shared = _common(contexts)
    if not shared:
        return None
    phases = {f[0] for f in distinct}
    return Target((phases.pop() if len(phases) == 1 else host_phase, *shared), False, located)


def _common(paths: Sequence[Frames]) -> Frames:
    if not paths:
        return ()
    first, n = paths[0], min(len(p) for p in paths)
    for other in paths[1:]:
        i = 0
        while i < n and first[i] == other[i]:
            i += 1
        n = i
    return first[:n]


def between(before: Target | None, after: Target | None) -> Frames | None:
    """Where the time between two dispatches goes (see the module's rule)."""
    a = before.hung_from() if before is not None else ()
    b = after.hung_from() if after is not None else ()
    shared = _common([a, b]) if a and b else ()
    if len(shared) >= 2:  # a phase and at least one frame below it
        return shared
    for side in (a, b):
        if len(side) >= 2:
            return side[:2]
    return None


def step_thread(dispatches: Sequence[Dispatch], marks: Sequence[int]) -> int | None:
    """The line (thread) whose outermost dispatches inside the steps took longest."""
    busy: dict[int, int] = {}
    for d in dispatches:
        if d.outer and marks[0] <= d.start < marks[-1]:
            busy[d.line] = busy.get(d.line, 0) + d.duration
    return max(busy, key=busy.__getitem__) if busy else None


def moves(
    dispatches: Sequence[Dispatch],
    target_of: Callable[[int], Target | None],
    host_phase_at: Callable[[int], int],
    marks: Sequence[int],
    compiles: Sequence[tuple[int, int]],
) -> list[Move]:
    """The host time to move, in trace time throughout: ``marks`` are the
    steps' bounds (step ``s`` from ``marks[s]`` to ``marks[s + 1]``),
    ``compiles`` the spans JAX compiled in, ``target_of(i)`` the target of
    dispatch ``i``, ``host_phase_at(t)`` the phase frame the host was in.

    A program with no frame of the user's (JAX's own zeros and reshapes of a
    gradient) keeps its own dispatch time but is no neighbour: the Python
    around it goes with the located dispatches on either side."""
    if len(marks) < 2:
        return []
    line = step_thread(dispatches, marks)
    compiles = _union(compiles)
    out: list[Move] = []
    anchor: tuple[int, Target, int, int] | None = (
        None  # (end, target, step, host) of the last located dispatch
    )
    inside = 0  # ns since the anchor that moved with unlocated dispatches
    for i, d in enumerate(dispatches):
        if d.line != line or not d.outer:
            continue
        end = d.start + d.duration
        step = bisect.bisect_right(marks, d.start) - 1
        if (
            not 0 <= step < len(marks) - 1
            or end > marks[step + 1]
            or _compiled(compiles, d.start, end)
        ):
            anchor = None  # what ran around a compile or outside the steps stays where it was timed
            continue
        target, host = target_of(i), host_phase_at(d.start)
        if target is not None and d.duration > 0:
            out.append(Move(target.frames, host, step, d.duration))
        if target is None or not target.located:
            inside += d.duration if target is not None else 0
            continue
        if anchor is not None and anchor[2] == step and anchor[3] == host:
            gap, spent = between(anchor[1], target), d.start - anchor[0] - inside
            if gap is not None and spent > 0 and not _compiled(compiles, anchor[0], d.start):
                out.append(Move(gap, host, step, spent))
        anchor, inside = (end, target, step, host), 0
    return out


def _union(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping spans joined: disjoint, in order."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _compiled(spans: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether a span of ``spans`` (disjoint, in order) overlaps ``[start, end)``."""
    at = bisect.bisect_left(spans, (end,))
    return at > 0 and spans[at - 1][1] > start


def bound_shifts(moved: Sequence[tuple[int, int, int]], steps: int) -> dict[int, tuple[int, int]]:
    """Per node, how its per-step bounds move when each ``(node, step, ns)``
    is added: the least and greatest of its per-step sums (0 in a step it got
    nothing), which keep a lower bound of its quietest step and an upper
    bound of its busiest."""
    per_step: dict[int, list[int]] = {}
    for node, step, ns in moved:
        per_step.setdefault(node, [0] * steps)[step] += ns
    return {node: (min(values), max(values)) for node, values in per_step.items()}
