"""Whole-tree passes over the flat columns, in numpy.

A first request on a 100k-node profile cannot afford a Python loop per node
per metric (each costs tens of milliseconds on a busy host). Nodes are handled
a depth level at a time instead: a pass is one numpy operation per level, and
real trees are a few dozen levels deep. A deeper tree (a long recursion) is
handled by the model's own loops, O(n) as before: `Levels.levels` is None
then and callers take their Python path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np  # a TensorBoard dependency

from ..model.tree import Tree

#: Deeper trees take the Python path: a level costs a few numpy calls, so past
#: this many the per-call overhead outgrows a loop over the nodes.
MAX_LEVELS = 512  # well inside int16, whose stable argsort is a radix sort


class Levels:
    """A tree's nodes grouped by depth, from its ``parent`` column.

    Attributes:
        parent: Parent per node as int64 (``-1`` for the root, node 0).
        levels: Node arrays for depth 1, 2, ... (the root is depth 0), or
            None when the tree is deeper than `MAX_LEVELS`.
    """

    def __init__(self, parent: Sequence[int] | np.ndarray) -> None:
        self.parent = np.asarray(parent, dtype=np.int64)
        self.levels = _levels(self.parent)

    def __len__(self) -> int:
        return len(self.parent)

    def subtree_sums(self, columns: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
        """Inclusive values: per column, each node's value plus its descendants'
        (exact int64 sums, no float weights). Only with `levels`; see `inclusive`."""
        out = {name: np.array(values, dtype=np.int64) for name, values in columns.items()}
        parent = self.parent
        for nodes in reversed(self.levels):
            up = parent[nodes]
            for column in out.values():  # 1-D add.at is several times faster than one 2-D call
                np.add.at(column, up, column[nodes])
        return out

    def nested(self, frame: np.ndarray) -> np.ndarray | None:
        """Per node: does its frame occur among its ancestors (a recursion)?
        As `dc_core.model.views.nested`; None when the tree is too deep (use that)."""
        if self.levels is None:
            return None
        parent = self.parent
        flags = np.zeros(len(parent), dtype=bool)
        active = np.arange(1, len(parent))
        up = parent[1:].copy()
        while active.size:  # one step up per round: at most depth rounds
            hit = frame[up] == frame[active]
            flags[active[hit]] = True
            keep = ~hit & (up > 0)
            active, up = active[keep], parent[up[keep]]
        return flags


def inclusive(tree: Tree, levels: Levels | None = None) -> dict[str, np.ndarray]:
    """Every metric's inclusive column of ``tree`` as int64 arrays: by levels,
    or by `Tree.inclusive` (the model's own loop) for a tree too deep for them."""
    if levels is None:
        levels = Levels(tree.parent)
    if levels.levels is None:
        return {m: np.array(tree.inclusive(m), dtype=np.int64) for m in tree.excl}
    return levels.subtree_sums(tree.excl)


def _levels(parent: np.ndarray) -> list[np.ndarray] | None:
    n = len(parent)
    if n == 0 or parent[0] != -1:
        return None
    depth = np.zeros(n, dtype=np.int64)
    active = np.arange(1, n)
    up = parent[1:].copy()
    for _ in range(MAX_LEVELS):
        if not active.size:
            break
        if (up < 0).any():  # a second root: not a tree the level passes can handle
            return None
        depth[active] += 1
        keep = up > 0
        active, up = active[keep], parent[up[keep]]
    else:
        if active.size:
            return None
    order = np.argsort(depth.astype(np.int16), kind="stable")  # a radix sort for 16-bit keys
    bounds = np.searchsorted(depth[order], np.arange(1, int(depth.max(initial=0)) + 2))
    return [order[bounds[d] : bounds[d + 1]] for d in range(len(bounds) - 1)]
