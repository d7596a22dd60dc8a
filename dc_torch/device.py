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

from typing import Any

import torch

from dc_core.collector import METRIC_COUNT

MARK = "dc#"


def cuda_present() -> bool:
    try:
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken driver means no device tracing
        return False


class DeviceTracer:
    """Owns the Kineto session of one window."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
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
        ingest(self.adapter, profiler.events())


def _marked_node(event: Any) -> int:
    """Collector node of the nearest ``dc#`` marker at or above ``event``, or -1."""
    while event is not None:
        name = event.name
        if name.startswith(MARK):
            return int(name[len(MARK):])
        event = event.cpu_parent
    return -1


def ingest(adapter: Any, events: Any) -> dict[str, int]:
    """Attach device activities and allocations of Kineto ``events`` to marked nodes.

    Returns counts of what was attached and of activities without a marked
    launcher (e.g. launched outside any operator scope), for tests and logs.
    """
    c = adapter.collector
    device_time = adapter.metric_device_time
    alloc = adapter.metric_alloc
    attached = unmarked = 0
    for event in events:
        kernels = getattr(event, "kernels", None) or ()
        memory = getattr(event, "device_memory_usage", 0) or 0
        if not kernels and memory <= 0:
            continue
        node = _marked_node(event)
        if node < 0:
            unmarked += len(kernels)
            continue
        if memory > 0:
            c.add(node, alloc, int(memory))
        for kernel in kernels:
            fid = adapter.frames.kernel(kernel.name, f"cuda:{kernel.device}")
            child = c.child(node, fid)
            c.add(child, device_time, int(kernel.duration * 1000))  # Kineto reports µs
            c.add(child, METRIC_COUNT, 1)
            attached += 1
    return {"attached": attached, "unmarked": unmarked}
