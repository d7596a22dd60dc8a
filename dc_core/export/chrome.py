"""Chrome trace / Perfetto: the aggregated tree as a flame chart.

Each drawn node is a ``B``/``E`` (begin/end) pair on one thread, in nesting
order (`layout.flame_edges`), so readers nest by the order of the events and
not by comparing float sums: a child never ends after its parent (complete
``X`` events, whose ends readers compute as ``ts + dur`` in floating point,
did, many times per profile). Timestamps are the layout's integer units
converted once each to microseconds, a monotone conversion.

The event name is the frame's label alone. File, line, detail and the node's
exclusive metrics ride on the ``E`` event as ``args`` (Chrome and Perfetto
merge them into the slice): speedscope's importer names a frame after its
opening event's name *and* args, and tells same-named events apart by them.
"""

from __future__ import annotations

import json
from typing import Any

from ..model.tree import Tree
from ..store.profile import Profile
from .layout import flame_edges


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    """``profile`` as Chrome trace-event JSON: one flame chart of ``metric``.

    Args:
        profile: The window to export.
        metric: The metric whose inclusive values are the slices' durations;
            a ``*_ns`` metric is drawn in real time, any other one unit per µs.

    Returns:
        The UTF-8 JSON document (``traceEvents`` and ``displayTimeUnit``).
    """
    pid, tid = profile.rank, 0
    events: list[dict[str, Any]] = [
        _metadata(
            "process_name",
            pid,
            tid,
            f"rank {profile.rank} ({profile.host}) steps {profile.steps[0]}-{profile.steps[1] - 1}",
        ),
        _metadata("thread_name", pid, tid, metric),
    ]
    events += slice_events(profile.tree, metric, pid, tid)
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}).encode()


def slice_events(tree: Tree, metric: str, pid: int = 0, tid: int = 0) -> list[dict[str, Any]]:
    """The ``B``/``E`` events of ``tree``'s flame chart, in nesting order."""
    scale = 1000 if metric.endswith("_ns") else 1  # layout units per µs
    events = []
    for edge in flame_edges(tree, metric):
        frame = tree.node_frame(edge.node)
        event = {
            "ph": "B" if edge.opens else "E",
            "pid": pid,
            "tid": tid,
            "name": frame.label(),
            "cat": frame.kind,
            "ts": edge.at / scale if scale != 1 else edge.at,
        }
        if not edge.opens:
            event["args"] = {
                "file": frame.file,
                "line": frame.line,
                "detail": frame.detail,
                **{m: column[edge.node] for m, column in tree.excl.items()},
            }
        events.append(event)
    return events


def _metadata(name: str, pid: int, tid: int, value: str) -> dict[str, Any]:
    """A metadata (``M``) event naming the process or thread."""
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": value}}
