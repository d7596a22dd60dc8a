"""Device activity through Kineto: kernels, memcpy and memset under the operator that launched them.

Only on machines with CUDA (or ROCm, which torch exposes as CUDA). While a
window is open, every operator scope also opens a cheap ``RecordFunction``
named ``dc#<node>``; Kineto (CUPTI/RocTracer) correlates each device activity
with the CPU op that launched it, so walking from that op up to the nearest
``dc#`` marker names the collector node. At window close the activities are
added there as ``kernel`` children with ``device_time_ns`` and ``count``, and
the CUDA caching allocator's allocations (Kineto memory events) as
``alloc_bytes`` of the marked node. On CPU-only machines nothing here runs and
operators are the leaves.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import METRIC_COUNT

if TYPE_CHECKING:
    from dc_torch.hub import Hub

MARK = "dc#"


def cuda_present() -> bool:
    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver means no device tracing
        return False


class DeviceTracer:
    """Owns the Kineto session of one window."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.on = False
        self._profiler: Any = None
        self._record = torch._C._profiler._RecordFunctionFast

    def mark(self, node: int) -> Any:
        """An entered ``RecordFunction`` naming ``node``; the caller exits it."""
        marker = self._record(f"{MARK}{node}")
        marker.__enter__()
        return marker

    def start(self, enabled: bool) -> None:
        if not enabled or not cuda_present():
            return
        from torch.profiler import ProfilerActivity, profile

        self._profiler = profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            profile_memory=True,
            record_shapes=False,
            with_stack=False,
        )
        self._profiler.__enter__()
        self.on = True

    def stop(self) -> None:
        """Stop Kineto and add what it saw to the collector (before the window is written)."""
        profiler, self._profiler = self._profiler, None
        self.on = False
        if profiler is None:
            return
        profiler.__exit__(None, None, None)
        ingest(self.hub, profiler.events())


def _marked_node(event: Any, overlapping: Markers | None = None) -> int:
    """Collector node of the nearest ``dc#`` marker at or above ``event``, or -1.

    The Python capture path opens the marker around the torch call, so it is an
    ancestor. The native path opens it from the op's own RecordFunction
    callbacks, next to the op's record: the two overlap without nesting, so at
    each level ``overlapping`` is asked for the marker that starts with it."""
    while event is not None:
        name = event.name
        if name.startswith(MARK):
            return int(name[len(MARK) :])
        if overlapping is not None:
            node = overlapping.of(event)
            if node >= 0:
                return node
        event = event.cpu_parent
    return -1


class Markers:
    """``dc#`` records per thread, for finding the one opened by an op's own callback."""

    #: How far (µs) a marker may start before its op's record: when our
    #: callback runs before the profiler's own, the marker opens first. After
    #: the op's start there is no clock bound: our callback's own work (slow
    #: under a sanitizer or a loaded host) comes first, so any marker opening
    #: inside the op's span may be its own, and the nearest one is.
    SLACK_US = 20.0

    def __init__(self, events: Any) -> None:
        self.by_thread: dict[int, list[tuple[float, float, int]]] = {}
        for event in events:
            span = getattr(event, "time_range", None)
            if span is not None and event.name.startswith(MARK):
                self.by_thread.setdefault(event.thread, []).append(
                    (span.start, span.end, int(event.name[len(MARK) :]))
                )
        for spans in self.by_thread.values():
            spans.sort()

    def of(self, event: Any) -> int:
        """Node of the marker that overlaps ``event`` and starts closest to it
        (from ``SLACK_US`` before its start to its end), or -1."""
        spans = self.by_thread.get(getattr(event, "thread", None))
        span = getattr(event, "time_range", None)
        if not spans or span is None:
            return -1
        best, node = float("inf"), -1
        for first, last, marked in spans[
            bisect.bisect_left(spans, (span.start - self.SLACK_US,)) :
        ]:
            if first > span.end:
                break
            if last >= span.start and abs(first - span.start) < best:
                best, node = abs(first - span.start), marked
        return node


def ingest(hub: Hub, events: Any) -> dict[str, int]:
    """Attach device activities and allocations of Kineto ``events`` to marked nodes.

    Returns counts of what was attached and of activities without a marked
    launcher (e.g. launched outside any operator scope), for tests and logs.
    """
    c, window = hub.collector, hub.window
    device_time = window.metric_device_time
    alloc = window.metric_alloc
    attached = unmarked = 0
    events = list(events)
    overlapping = Markers(events) if window.capture == "native" else None
    for event in events:
        kernels = getattr(event, "kernels", None) or ()
        memory = getattr(event, "device_memory_usage", 0) or 0
        if not kernels and memory <= 0:
            continue
        node = _marked_node(event, overlapping)
        if node < 0:
            unmarked += len(kernels)
            continue
        if memory > 0:
            c.add(node, alloc, int(memory))
        for kernel in kernels:
            fid = hub.frames.kernel(kernel.name, f"cuda:{kernel.device}")
            child = c.child(node, fid)
            c.add(child, device_time, int(kernel.duration * 1000))  # Kineto reports µs
            c.add(child, METRIC_COUNT, 1)
            attached += 1
    return {"attached": attached, "unmarked": unmarked}
