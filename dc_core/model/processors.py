"""Pure processors: each takes trees and returns a new tree, inputs untouched.

``tree = prune_small(tree, "cpu_time_ns", min_fraction=0.01)``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .tree import Frame, Tree


def _rebuild(tree: Tree, place: Callable[[Tree, int, Frame], int]) -> Tree:
    """Copy ``tree`` node by node; ``place(out, new_parent, frame)`` chooses the
    node each old node's metrics go to (a new child, or an existing node)."""
    out = Tree()
    mapping = {0: 0}
    for node in tree.preorder():
        target = 0 if node == 0 else place(out, mapping[tree.parent[node]], tree.node_frame(node))
        mapping[node] = target
        for name, column in tree.excl.items():
            if column[node]:
                out.add(target, name, column[node])
    _finish(out, tree.units)
    return out


def _finish(out: Tree, units: dict[str, str]) -> None:
    for name, unit in units.items():
        out.excl.setdefault(name, [0] * len(out))
        out.units[name] = unit


def prune_small(tree: Tree, metric: str, min_fraction: float = 0.01) -> Tree:
    """Drop subtrees whose inclusive ``metric`` is below ``min_fraction`` of the
    root's; their cost is folded into the parent's exclusive value so totals hold."""
    incl = tree.inclusive(metric)
    limit = incl[0] * min_fraction
    out = Tree()
    mapping = {0: 0}
    for node in tree.preorder():
        parent_new = mapping.get(tree.parent[node]) if node else None
        if node and parent_new is None:
            continue
        if node and incl[node] < limit:
            for name in tree.excl:
                value = tree.inclusive(name)[node]
                if value:
                    out.add(parent_new, name, value)
            continue
        new = 0 if node == 0 else out.child(parent_new, tree.node_frame(node))
        mapping[node] = new
        for name, column in tree.excl.items():
            if column[node]:
                out.add(new, name, column[node])
    _finish(out, tree.units)
    return out


def collapse_recursion(tree: Tree) -> Tree:
    """Fold a frame that calls itself (directly) into one node."""

    def place(out: Tree, parent: int, frame: Frame) -> int:
        return parent if parent and out.node_frame(parent) == frame else out.child(parent, frame)

    return _rebuild(tree, place)


def merge(trees: Iterable[Tree], root_frames: Iterable[Frame] | None = None) -> Tree:
    """Sum trees node by node (same call path, same node). With ``root_frames``
    each tree is placed under its own top-level frame instead (e.g. one per rank)."""
    out = Tree()
    labels = list(root_frames) if root_frames is not None else None
    units: dict[str, str] = {}
    for index, tree in enumerate(trees):
        base = out.child(0, labels[index]) if labels is not None else 0
        mapping = {0: base}
        for node in tree.preorder():
            if node:
                mapping[node] = out.child(mapping[tree.parent[node]], tree.node_frame(node))
            for name, column in tree.excl.items():
                if column[node]:
                    out.add(mapping[node], name, column[node])
        units = {**tree.units, **units}
    _finish(out, units)
    return out


def merge_windows(trees: Iterable[Tree]) -> Tree:
    """Aggregate several windows of one rank into one tree."""
    return merge(trees)


def merge_ranks(trees: Iterable[Tree], ranks: Iterable[int] | None = None) -> Tree:
    """Sum ranks into one tree, or with ``ranks`` keep one subtree per rank."""
    if ranks is None:
        return merge(trees)
    return merge(trees, [Frame("phase", f"rank {r}") for r in ranks])


def filter_kinds(tree: Tree, drop: Iterable[str]) -> Tree:
    """Remove nodes of the given kinds, splicing their children into the parent
    (e.g. hide ``native`` frames); their metrics go to the parent."""
    drop = set(drop)
    return _rebuild(
        tree, lambda out, parent, frame: parent if frame.kind in drop else out.child(parent, frame)
    )
