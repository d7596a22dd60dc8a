"""Hatchet's literal format (``GraphFrame.from_literal``): nested dicts with
``frame`` and ``metrics``; ``<metric>`` is exclusive, ``<metric> (inc)`` inclusive."""

from __future__ import annotations

import json

from ..profile import Profile


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    incl = {m: tree.inclusive(m) for m in tree.excl}

    def build(node: int) -> dict:
        frame = tree.node_frame(node)
        metrics = {}
        for name, column in tree.excl.items():
            metrics[name] = column[node]
            metrics[f"{name} (inc)"] = incl[name][node]
        return {
            "frame": {"name": frame.label(), "type": frame.kind, "file": frame.file, "line": frame.line},
            "metrics": metrics,
            "children": [build(k) for k in tree.children(node)],
        }

    return json.dumps([build(k) for k in tree.children(0)]).encode()
