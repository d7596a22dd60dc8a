"""Hatchet's literal format (``GraphFrame.from_literal``): a list of root
dicts, each with ``frame``, ``metrics`` and ``children``. A metric column whose
name contains ``(inc)`` is inclusive, any other one exclusive.

Every metric of the profile is a pair of columns, ``<metric>`` and
``<metric> (inc)``. The exported metric is also copied into ``time`` and
``time (inc)`` (same unit as the metric), the columns Hatchet uses when none is
named: ``gf.tree()`` and the other defaults then work on it.

Built and written without recursion (`nested.dumps`), so a call chain of any
depth exports (Hatchet's own reader recurses per level, though)."""

from __future__ import annotations

from typing import Any

from ..model.tree import Tree
from ..store.profile import Profile
from .nested import dumps

#: Hatchet's ``GraphFrame.default_metric``; ``"<it> (inc)"`` is its inclusive twin.
DEFAULT_COLUMN = "time"


def export(profile: Profile, metric: str = "cpu_time_ns") -> bytes:
    """``profile`` as Hatchet literal JSON, with ``metric`` in the default ``time`` columns.

    Args:
        profile: The window to export.
        metric: The metric copied into ``time`` / ``time (inc)``; it need not
            be one of the profile's columns (its values are then zero).

    Returns:
        The UTF-8 JSON list of root nodes (the window root's children).
    """
    tree = profile.tree
    top: list[dict[str, Any]] = []
    columns = _columns(tree, metric)
    stack = [(k, top) for k in reversed(tree.children(0))]  # (node, the list its literal goes in)
    while stack:
        node, siblings = stack.pop()
        frame = tree.node_frame(node)
        item = {
            "frame": {
                "name": frame.label(),
                "type": frame.kind,
                "file": frame.file,
                "line": frame.line,
            },
            "metrics": {name: column[node] for name, column in columns},
            "children": [],
        }
        siblings.append(item)
        stack.extend((k, item["children"]) for k in reversed(tree.children(node)))
    return dumps(top).encode()


def _columns(tree: Tree, metric: str) -> list[tuple[str, list[int]]]:
    """(column name, value per node): the default pair first, then each metric's pair."""
    zeros = [0] * len(tree)
    out = [
        (DEFAULT_COLUMN, tree.excl.get(metric, zeros)),
        (f"{DEFAULT_COLUMN} (inc)", tree.inclusive(metric)),
    ]
    for name, column in tree.excl.items():
        out += [(name, column), (f"{name} (inc)", tree.inclusive(name))]
    return out
