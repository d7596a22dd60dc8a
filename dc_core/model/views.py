"""Views of a tree: top-down is the tree itself; bottom-up and flat derive from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .tree import Frame, Tree

#: Callers kept under a frame in the bottom-up view; a deeper call path's cost
#: stays on the deepest caller shown. Inverting a call chain N deep costs N
#: nodes per node on it, so an unbounded view of a deep recursion is quadratic.
MAX_CALLERS = 64


def nested(tree: Tree, children: Callable[[int], list[int]] | None = None) -> list[bool]:
    """Per node: does its frame already occur among its ancestors (recursion)?
    Inclusive totals count such a node once, at its outermost occurrence.

    One depth-first walk with a count per frame on the current path; ``children``
    defaults to ``tree.children`` (the plugin passes its faster index).
    """
    kids = children or tree.children
    frame = tree.frame
    flags = [False] * len(tree)
    on_path = [0] * len(tree.frames)
    stack = [0]
    while stack:
        node = stack.pop()
        if node < 0:  # leaving ~node
            on_path[frame[~node]] -= 1
            continue
        fid = frame[node]
        flags[node] = on_path[fid] > 0
        on_path[fid] += 1
        stack.append(~node)
        stack.extend(kids(node))
    return flags


def bottom_up(tree: Tree, select: Callable[[Frame], bool] | None = None, max_callers: int = MAX_CALLERS,
              max_nodes: int | None = None) -> Tree:
    """Inverted tree: top level = frames, children = their callers.

    Without ``select``, every node's exclusive cost goes to the inverted path
    (self frame, caller, caller's caller, ...), so a top-level node's inclusive
    value is the frame's total self cost, and a caller's inclusive value is the
    part of it that flowed through that caller path. Read the view through
    inclusive values only: the exclusive column is bookkeeping (each cost is
    stored once, on the deepest caller its path reached), not a row's own
    cost; `dc_core.model.report.view_columns` gives what a row shows. With ``select`` (e.g. operators
    only), the top level holds the matching frames with their *inclusive* cost
    (an operator with its kernels), counted once when the frame nests in itself.

    Bounded in time and memory: a path stops after ``max_callers`` callers, and
    once the view holds ``max_nodes`` nodes (default four per node of ``tree``)
    paths only follow callers already in it. A cost stays on the deepest caller
    its path reached, so every top-level total is exact.
    """
    budget = 4 * len(tree) + 1024 if max_nodes is None else max_nodes
    inner = nested(tree) if select is not None else None
    out = Tree()
    for node in range(1, len(tree)):
        frame = tree.node_frame(node)
        if select is None:
            values = {m: col[node] for m, col in tree.excl.items() if col[node]}
        else:
            if not select(frame) or inner[node]:
                continue
            values = {m: v for m in tree.excl if (v := tree.inclusive(m)[node])}
        if not values:
            continue
        target = out.child(0, frame)
        caller = tree.parent[node]
        for _ in range(max_callers):
            if caller <= 0:
                break
            above = tree.node_frame(caller)
            step = out.child(target, above) if len(out) < budget else out.find_child(target, above)
            if step is None:
                break
            target, caller = step, tree.parent[caller]
        for metric, value in values.items():
            out.add(target, metric, value)
    for metric, unit in tree.units.items():
        out.excl.setdefault(metric, [0] * len(out))
        out.units[metric] = unit
    return out


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
    inner = nested(tree)
    incl = {m: tree.inclusive(m) for m in tree.excl}
    for node in range(1, len(tree)):
        fid = tree.frame[node]
        row = rows.get(fid)
        if row is None:
            row = rows[fid] = FlatRow(tree.frames[fid], {m: 0 for m in tree.excl}, {m: 0 for m in tree.excl}, 0)
        row.nodes += 1
        for metric, column in tree.excl.items():
            row.excl[metric] += column[node]
            if not inner[node]:
                row.incl[metric] += incl[metric][node]
    return list(rows.values())


def top_flat(tree: Tree, metric: str, limit: int = 20, inclusive: bool = False) -> list[FlatRow]:
    """The ``limit`` heaviest frames by ``metric``."""
    key = (lambda r: r.incl.get(metric, 0)) if inclusive else (lambda r: r.excl.get(metric, 0))
    return sorted(flat(tree), key=key, reverse=True)[:limit]
