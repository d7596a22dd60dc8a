"""The collector's memory readout → tree metrics and the profile's `DeviceMemory`.

``Collector.memory_snapshot()`` gives, per device, per-node columns indexed
by collector node (``alloc_bytes``, ``free_bytes``, bytes live at the peak
per category) and the peak's facts. They join the snapshot's metric columns
before the tree is built, so they follow the nodes through any merge; the
peak's node travels the same way, as a carried column (`PEAK_MARK`).
"""

from __future__ import annotations

import bisect
import functools
import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from ..model.kinds import MEMORY_CATEGORIES
from ..model.tree import Tree
from ..store.profile import DeviceMemory

logger = logging.getLogger("deepcontext")

#: Every metric memory tracking gives a node (for the main device).
MEMORY_METRIC_NAMES = (
    "alloc_bytes",
    "free_bytes",
    "peak_live_bytes",
    *(f"peak_live_bytes.{category}" for category in MEMORY_CATEGORIES),
)
#: A carried column's prefix (no metric has it): 1 at the device's peak node.
PEAK_MARK = "memory peak at "

# c10::DeviceType numbers → torch's device names
_DEVICE_NAMES = {0: "cpu", 1: "cuda", 12: "xpu", 13: "mps", 19: "mtia"}


def device_name(device_type: int, index: int) -> str:
    """``cpu`` for the host, ``<type>:<index>`` for an accelerator (``cuda:0``)."""
    name = _DEVICE_NAMES.get(device_type, f"device{device_type}")
    return name if name == "cpu" else f"{name}:{index}"


def fold_memory(snap: MutableMapping[str, Any], readout: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Add the readout's per-node columns to ``snap``'s metrics (the main device's
    without suffix, the others' with ``@<device>``) and a `PEAK_MARK` column per
    device; returns the devices' window facts, the main device first.

    The main device is the first accelerator that reported, else the host."""
    nodes = len(snap["parent"])
    devices = [d for d in readout.get("devices", ()) if d.get("alloc_bytes") or d.get("peak")]
    devices.sort(key=lambda d: (d["type"] == 0, d["type"], d["index"]))
    metrics = snap.setdefault("metrics", {})
    units = snap.setdefault("units", {})
    facts = []
    for position, d in enumerate(devices):
        name = device_name(d["type"], d["index"])
        suffix = "" if position == 0 else f"@{name}"
        columns = {
            "alloc_bytes": d["alloc_bytes"],
            "free_bytes": d["free_bytes"],
            **{f"peak_live_bytes.{c}": d["peak_bytes"].get(c, ()) for c in MEMORY_CATEGORIES},
        }
        by_category = [_padded(d["peak_bytes"].get(c, ()), nodes) for c in MEMORY_CATEGORIES]
        columns["peak_live_bytes"] = [sum(values) for values in zip(*by_category)]
        for metric, values in columns.items():
            padded = _padded(values, nodes)
            if metric == "alloc_bytes" and metric in metrics and not suffix:
                # the allocator's count replaces one read from operator outputs
                metrics.pop(metric)
            if any(padded):
                metrics[metric + suffix] = padded
                units[metric + suffix] = "bytes"
        peak_node = d["peak_node"]
        if 0 <= peak_node < nodes:
            mark = [0] * nodes
            mark[peak_node] = 1
            metrics[PEAK_MARK + name] = mark
        facts.append({"device": name, **d})
    return facts


def window_memory(
    config: Any,
    adapter: Any,
    collector: Any,
    snap: MutableMapping[str, Any],
    fail: Callable[[BaseException, str], None],
) -> tuple[list[dict[str, Any]], list[str], str]:
    """Memory by context for a window's profile, when ``config`` asks for it:
    the devices' facts (their columns joined to ``snap``), the metrics the
    window could not give, and why (warned once per reason). A failed readout
    is the profiler's (``fail``); the window is still written, without memory."""
    if not getattr(config, "collect_memory", False):
        return [], [], ""
    collected, note = adapter.memory_state()
    if collected:
        try:
            readout = adapter.memory_readout(collector)
            missing = [name for name in readout.get("missing", ()) if name in MEMORY_METRIC_NAMES]
            return fold_memory(snap, readout), missing, note
        except Exception as exc:
            fail(exc, "memory readout")
            note = f"the memory readout failed: {type(exc).__name__}"
    _warn_missing(note)
    return [], list(MEMORY_METRIC_NAMES), note


@functools.cache
def _warn_missing(note: str) -> None:
    logger.warning(
        "deepcontext: memory was asked for and is not collected (%s); the windows are written "
        "without %s",
        note,
        ", ".join(MEMORY_METRIC_NAMES),
    )


def device_memory(
    facts: Sequence[Mapping[str, Any]],
    carried: Mapping[str, Sequence[int]],
    tree: Tree,
    *,
    window_t0: int,
    step_begins_ns: Sequence[int],
    first_step: int,
) -> list[DeviceMemory]:
    """The profile's `DeviceMemory` per device, from `fold_memory`'s facts and the
    carried peak columns (the tree's node ids): the peak's node, phase and step."""
    out = []
    for d in facts:
        column = carried.get(PEAK_MARK + d["device"]) or ()
        peak_node = next((n for n, v in enumerate(column) if v), -1)
        out.append(
            DeviceMemory(
                device=d["device"],
                peak_bytes=int(d["peak"]),
                peak_t_ns=max(int(d["peak_ns"]) - window_t0, 0) if d["peak_ns"] else 0,
                peak_node=peak_node,
                peak_step=_step_at(int(d["peak_ns"]), step_begins_ns, first_step),
                peak_phase=_phase_of(tree, peak_node),
                held_at_peak_bytes=int(d["held_at_peak"]),
                allocator_peak_bytes=int(d["allocator_peak"]),
                max_reserved_bytes=int(d["max_reserved"]),
                live_dropped=int(d["live_dropped"]),
                unknown_frees=int(d["unknown_frees"]),
                timeline_t_ns=[max(t - window_t0, 0) for t in d["timeline_ns"]],
                timeline_bytes=[int(b) for b in d["timeline_bytes"]],
            )
        )
    return out


def _padded(values: Sequence[int], n: int) -> list[int]:
    values = list(values[:n])
    return values + [0] * (n - len(values))


def _step_at(t_ns: int, begins: Sequence[int], first_step: int) -> int:
    """The step running at ``t_ns``: the last to begin at or before it (a step runs
    to the next one's start, its compile included); -1 before the first or unknown."""
    if not t_ns or not begins or t_ns < begins[0]:
        return -1
    return first_step + bisect.bisect_right(begins, t_ns) - 1


def _phase_of(tree: Tree, node: int) -> str:
    """The phase frame above ``node`` (forward, backward, optimizer, ...), or ""."""
    while node > 0:
        frame = tree.node_frame(node)
        if frame.kind == "phase":
            return frame.name
        node = tree.parent[node]
    return ""
