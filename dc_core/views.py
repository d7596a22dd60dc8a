"""Views of a tree: top-down is the tree itself; bottom-up and flat derive from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .tree import Frame, Tree


def bottom_up(tree: Tree, select: Callable[[Frame], bool] | None = None) -> Tree:
    """Inverted tree: top level = frames, children = their callers.

    Without ``select``, every node's exclusive cost goes to the inverted path
    (self frame, caller, caller's caller, ...), so a top-level node's inclusive
    value is the frame's total self cost. With ``select`` (e.g. operators
    only), the top level holds the matching frames with their *inclusive* cost
    (an operator with its kernels), counted once when the frame nests in itself.
    """
    out = Tree()
    for node in range(1, len(tree)):
        frame = tree.node_frame(node)
        if select is None:
            values = {m: col[node] for m, col in tree.excl.items() if col[node]}
        else:
            if not select(frame) or _has_ancestor_frame(tree, node, tree.frame[node]):
                continue
            values = {m: v for m in tree.excl if (v := tree.inclusive(m)[node])}
        if not values:
            continue
        target = 0
        while node > 0:
            target = out.child(target, tree.node_frame(node))
            node = tree.parent[node]
        for metric, value in values.items():
            out.add(target, metric, value)
    for metric, unit in tree.units.items():
        out.excl.setdefault(metric, [0] * len(out))
        out.units[metric] = unit
    return out


def _has_ancestor_frame(tree: Tree, node: int, frame: int) -> bool:
    node = tree.parent[node]
    while node > 0:
        if tree.frame[node] == frame:
            return True
        node = tree.parent[node]
    return False


@dataclass
class FlatRow:
    """One frame's totals over the whole tree."""

    frame: Frame
    excl: dict[str, int]
    incl: dict[str, int]
    nodes: int


def flat(tree: Tree) -> list[FlatRow]:
    """Per frame: exclusive totals, and inclusive totals counted once per call
    path (a recursive frame is not counted twice). Sorted by frame order."""
    rows: dict[int, FlatRow] = {}
    for node in range(1, len(tree)):
        fid = tree.frame[node]
        row = rows.get(fid)
        if row is None:
            row = rows[fid] = FlatRow(tree.frames[fid], {m: 0 for m in tree.excl}, {m: 0 for m in tree.excl}, 0)
        row.nodes += 1
        nested = _has_ancestor_frame(tree, node, fid)
        for metric, column in tree.excl.items():
            row.excl[metric] += column[node]
            if not nested:
                row.incl[metric] += tree.inclusive(metric)[node]
    return list(rows.values())


def top_flat(tree: Tree, metric: str, limit: int = 20, inclusive: bool = False) -> list[FlatRow]:
    """The ``limit`` heaviest frames by ``metric``."""
    key = (lambda r: r.incl.get(metric, 0)) if inclusive else (lambda r: r.excl.get(metric, 0))
    return sorted(flat(tree), key=key, reverse=True)[:limit]
