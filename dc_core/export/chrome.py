"""Chrome trace / Perfetto: the aggregated tree as a flame chart.

An aggregated tree has no timeline, so each node becomes a complete event whose
duration is its inclusive value and whose children are laid out left to right
inside it (the way flame charts of aggregated profiles are drawn)."""

from __future__ import annotations

import json

from ..profile import Profile


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    incl = tree.inclusive(metric)
    to_us = 1e-3 if metric.endswith("_ns") else 1.0
    events = [{"ph": "M", "name": "process_name", "pid": profile.rank, "tid": 0,
               "args": {"name": f"rank {profile.rank} ({profile.host}) steps {profile.steps[0]}-{profile.steps[1] - 1}"}}]
    stack = [(0, 0.0)]
    while stack:
        node, start = stack.pop()
        if node:
            frame = tree.node_frame(node)
            events.append({
                "ph": "X", "pid": profile.rank, "tid": 0, "name": frame.label(), "cat": frame.kind,
                "ts": start * to_us, "dur": incl[node] * to_us,
                "args": {"file": frame.file, "line": frame.line, "detail": frame.detail,
                         **{m: tree.value(node, m) for m in tree.excl}},
            })
        offset = start
        for kid in tree.children(node):
            stack.append((kid, offset))
            offset += incl[kid]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}).encode()
