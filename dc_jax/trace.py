"""A captured JAX trace → executed XLA ops, aggregated per op, kernel and phase.

Reads the XSpace that ``jax.profiler`` wrote through ``jax.profiler.ProfileData``
(the supported reader). Every event tagged with ``hlo_op``/``hlo_module`` is an
executed HLO instruction: on CPU a thunk on an XLA client thread (its
``cpu_time_ns``, exclusive of thunks nested in it, e.g. a ``while`` body), on a
GPU a kernel on a stream line of a ``/device:`` plane (``device_time_ns``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Device-plane lines that summarise rather than execute (kernels live on stream lines).
_SUMMARY_LINES = {
    "XLA Modules",
    "XLA Ops",
    "Steps",
    "Framework Ops",
    "Framework Name Scope",
    "Source code",
    "XLA TraceMe",
    "TensorFlow Name Scope",
    "TensorFlow Ops",
}
_MODULE_ID = re.compile(r"\((\d+)\)$")
_DISPATCH = re.compile(r"^(?:Pjit|Jit|Pmap)Function\((.*)\)$")
_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")


def module_of(function: str) -> str:
    """The XLA module name JAX gives a jitted function: ``<lambda>`` → ``jit__lambda``."""
    return "jit_" + _UNSAFE.sub("_", function).rstrip("_")


def _module_and_program(stats: dict) -> tuple[str, int]:
    """The op's XLA module name and program id: two jitted functions of one name
    (``jax.jit(teacher.apply)``, ``jax.jit(student.apply)``: both ``jit_apply``)
    are told apart by the id, which older XLA versions append to the name."""
    name = str(stats.get("hlo_module", ""))
    suffix = _MODULE_ID.search(name)
    program = stats.get("program_id")
    if suffix is not None:
        name = name[: suffix.start()]
        if program is None:
            program = suffix.group(1)
    try:
        return name, int(program or 0)
    except (TypeError, ValueError):
        return name, 0


@dataclass
class OpTime:
    """One (program, instruction, kernel, device, marked phase) aggregate."""

    module: str
    program: int
    hlo_op: str
    kernel: str
    device: str
    on_device: bool
    phase: str | None
    count: int = 0
    time_ns: int = 0


@dataclass
class Dispatch:
    """A host call of a jitted function (an eager op is one too), on one thread's line."""

    start: int
    duration: int
    module: str  # the XLA module name it runs
    line: int  # its thread: the index of its line in the host plane
    outer: bool  # not inside another dispatch of its thread (one traced while compiling is)


@dataclass
class _Event:
    module: str
    program: int
    hlo_op: str
    kernel: str
    device: str
    on_device: bool
    start: int
    duration: int
    run: int


def _stats(event: Any) -> dict:
    try:
        return dict(event.stats)
    except Exception:  # an event without readable stats is not an op
        return {}


def _host_events(plane: Any) -> tuple[list[_Event], list[Dispatch]]:
    """CPU thunks (exclusive times) and the Python threads' dispatches of jitted functions."""
    ops: list[_Event] = []
    dispatches: list[Dispatch] = []
    for index, line in enumerate(plane.lines):
        open_ops: list[tuple[int, _Event]] = []  # (end, event) stack for nesting
        line_ops: list[_Event] = []
        outer_end = -1
        for event in line.events:
            name = event.name
            dispatch = _DISPATCH.match(name)
            if dispatch is not None:
                start, duration = int(event.start_ns), int(event.duration_ns)
                dispatches.append(
                    Dispatch(
                        start, duration, module_of(dispatch.group(1)), index, start >= outer_end
                    )
                )
                outer_end = max(outer_end, start + duration)
                continue
            if name.startswith("end: ") or "::" in name:
                continue  # thunk end markers and runtime TraceMes: half the events, never ops
            stats = _stats(event)
            hlo_op = stats.get("hlo_op")
            if not hlo_op:
                continue
            start, duration = int(event.start_ns), int(event.duration_ns)
            op = _Event(
                *_module_and_program(stats),
                str(hlo_op),
                str(hlo_op),
                f"cpu:{stats.get('device_ordinal', 0)}",
                False,
                start,
                duration,
                int(stats.get("run_id", 0)),
            )
            line_ops.append(op)
        line_ops.sort(key=lambda e: (e.start, -e.duration))
        for op in line_ops:
            while open_ops and open_ops[-1][0] <= op.start:
                open_ops.pop()
            if open_ops and op.start + op.duration <= open_ops[-1][0]:
                open_ops[-1][1].duration -= op.duration  # the parent's time is exclusive
            open_ops.append((op.start + op.duration, op))
        ops.extend(line_ops)
    return ops, dispatches


def _device_events(plane: Any, device: str) -> list[_Event]:
    """Kernels of one device plane; the plane's op line when it has no kernel lines."""
    kernels: list[_Event] = []
    summary: list[_Event] = []
    for line in plane.lines:
        target = (
            summary if line.name == "XLA Ops" else None if line.name in _SUMMARY_LINES else kernels
        )
        if target is None:
            continue
        for event in line.events:
            stats = _stats(event)
            hlo_op = stats.get("hlo_op") or (event.name if target is summary else "")
            if not hlo_op:
                continue
            target.append(
                _Event(
                    *_module_and_program(stats),
                    str(hlo_op),
                    event.name,
                    device,
                    True,
                    int(event.start_ns),
                    int(event.duration_ns),
                    int(stats.get("run_id", 0)),
                )
            )
    return kernels or summary


def _device_name(plane_name: str) -> str:
    """``/device:GPU:0`` → ``gpu:0``."""
    kind, _, index = plane_name[len("/device:") :].partition(":")
    return f"{kind.lower()}:{index or 0}"


def read(profile: Any) -> tuple[list[_Event], list[Dispatch]]:
    """Executed ops, and host dispatches in time order, of a ``ProfileData``."""
    events: list[_Event] = []
    dispatches: list[Dispatch] = []
    for plane in profile.planes:
        name = plane.name
        if name.startswith("/host:CPU"):
            host, calls = _host_events(plane)
            events.extend(host)
            dispatches.extend(calls)
        elif name.startswith("/device:") and not name.startswith("/device:CUSTOM"):
            events.extend(_device_events(plane, _device_name(name)))
    dispatches.sort(key=lambda d: (d.start, -d.duration))
    return events, dispatches


def profile_start_ns(profile: Any) -> int:
    """Wall-clock ns the trace's times count from (0 if the trace does not say)."""
    for plane in profile.planes:
        if plane.name == "Task Environment":
            try:
                return int(dict(plane.stats).get("profile_start_time", 0))
            except Exception:
                return 0
    return 0


def _first_ops(events: Iterable[_Event]) -> dict[tuple[str, int, int], int]:
    """(module, program, run) → when that run's first op began."""
    first: dict[tuple[str, int, int], int] = {}
    for e in events:
        key = (e.module, e.program, e.run)
        if e.run and (key not in first or e.start < first[key]):
            first[key] = e.start
    return first


def launches(
    events: Iterable[_Event], dispatches: list[Dispatch]
) -> dict[tuple[str, int, int], int]:
    """(module, program, run) → the index of the dispatch that launched that
    run: the last outermost dispatch of its function before the run's first
    op (JAX traces one call as a dispatch within a dispatch of one name)."""
    outer = [i for i, d in enumerate(dispatches) if d.outer]
    times = [dispatches[i].start for i in outer]
    out = {}
    for key, start in _first_ops(events).items():
        at = bisect.bisect_right(times, start)
        for i in reversed(outer[max(at - 64, 0) : at]):
            if dispatches[i].module == key[0]:
                out[key] = i
                break
    return out


def aggregate(
    events: Iterable[_Event],
    dispatches: list[Dispatch],
    phase_at: Callable[[int], str | None] | None = None,
    launched: dict[tuple[str, int, int], int] | None = None,
) -> list[OpTime]:
    """Sum events per (program, op, kernel, device, marked phase).

    ``phase_at(t)`` names the phase the user marked at trace time ``t``. A run
    of a compiled module is placed at the time the host dispatched it
    (``launched``, from `launches`), since with asynchronous dispatch the ops
    themselves may run after the marked block.
    """
    events = list(events)
    runs: dict[tuple[str, int, int], int] = {}  # (module, program, run) → when it was dispatched
    if phase_at is not None:
        if launched is None:
            launched = launches(events, dispatches)
        runs = _first_ops(events)
        runs.update((key, dispatches[i].start) for key, i in launched.items())
    totals: dict[tuple, OpTime] = {}
    for e in events:
        phase = (
            phase_at(runs.get((e.module, e.program, e.run), e.start))
            if phase_at is not None
            else None
        )
        key = (e.module, e.program, e.hlo_op, e.kernel, e.device, phase)
        agg = totals.get(key)
        if agg is None:
            agg = totals[key] = OpTime(
                e.module, e.program, e.hlo_op, e.kernel, e.device, e.on_device, phase
            )
        agg.count += 1
        agg.time_ns += max(e.duration, 0)
    return list(totals.values())
