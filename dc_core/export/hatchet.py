"""Hatchet's literal format (``GraphFrame.from_literal``): nested dicts with
``frame`` and ``metrics``; ``<metric>`` is exclusive, ``<metric> (inc)`` inclusive.

Built and written without recursion (`nested.dumps`), so a call chain of any
depth exports."""

from __future__ import annotations

from typing import Any

from ..profile import Profile
from .nested import dumps


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    tree = profile.tree
    incl = {m: tree.inclusive(m) for m in tree.excl}
    top: list[dict[str, Any]] = []
    stack = [(k, top) for k in reversed(tree.children(0))]  # (node, the list its literal goes in)
    while stack:
        node, siblings = stack.pop()
        frame = tree.node_frame(node)
        metrics = {}
        for name, column in tree.excl.items():
            metrics[name] = column[node]
            metrics[f"{name} (inc)"] = incl[name][node]
        item = {
            "frame": {"name": frame.label(), "type": frame.kind, "file": frame.file, "line": frame.line},
            "metrics": metrics,
            "children": [],
        }
        siblings.append(item)
        stack.extend((k, item["children"]) for k in reversed(tree.children(node)))
    return dumps(top).encode()
