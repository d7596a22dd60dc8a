"""The tab's Diff: two loaded windows as one delta tree, biggest change first.

The matching is `dc_core.model.diff`'s, shared with ``deepcontext diff``:
ids (A's node ids; a path only B has is ``len(A) + its id in B``), moved
lines, and the per-step change with its spread. This module only feeds it
the tab's indexes and shapes rows: a first diff of two 100k-node windows
costs what its rows cost, not a walk of both trees.
"""

from __future__ import annotations

from ..model import diff as shared
from .params import NotFound
from .store import Index


class Union(shared.Union):
    """`dc_core.model.diff.Union` over two loaded windows, keeping their indexes."""

    def __init__(self, a_index: Index, b_index: Index) -> None:
        super().__init__(_side(a_index), _side(b_index))
        self.a_index, self.b_index = a_index, b_index

    def check(self, node: int) -> None:
        """Raise `NotFound` for an id in range that names no union node (a B
        path that A also has goes by A's id)."""
        if not self.is_node(node):
            raise NotFound(f"node {node} is not in this diff")


def _side(index: Index) -> shared.Side:
    """The index's profile as a side, with the index's fast lookups."""
    return shared.side_of(
        index.profile,
        children=index.children,
        inclusive=index.incl,
        step_range=lambda metric: _step_range(index, metric),
    )


def _step_range(index: Index, metric: str):
    """`Profile.step_range` by the index's numpy levels (boxed: `memo` takes
    None for "not built yet")."""

    def build():
        bounds = index.profile.step_bounds
        low, high = bounds.get(f"{metric}.min"), bounds.get(f"{metric}.max")
        if low is None or high is None:
            return (None,)
        levels = index.levels()
        if levels.levels is None:  # too deep for the level passes: the model's loop
            return (index.profile.step_range(metric),)
        sums = levels.subtree_sums({"low": low, "high": high})
        return ((sums["low"], sums["high"]),)

    return index.memo(("step_range", metric), build)[0]


def build_union(a: Index, b: Index) -> Union:
    """The union of ``a`` and ``b`` (matched as requests need it)."""
    return Union(a, b)


def union_of(a: Index, b: Index) -> Union:
    """The cached union of ``a`` and ``b`` (the value keeps ``b`` alive, so its
    id in the key cannot be reused while the entry exists)."""
    return a.memo(("diff", b.ref, id(b)), lambda: build_union(a, b))


def _row(union: Union, node: int, metric: str) -> dict:
    frame = union.frame(node)
    a, b = union.values(metric, node)
    change = union.change(metric, node)
    row = {
        "id": node,
        "kind": frame.kind,
        "label": frame.label() if node else "A vs B",
        "name": frame.name,
        "file": frame.file,
        "line": frame.line,
        "backward": frame.backward,
        "a": a,
        "b": b,
        "in_a": node < union.size_a,
        "in_b": change.b_node >= 0,
        "kids": len(union.children(node)),
        "delta_ns": round(change.delta_ns),
        "spread_ns": change.spread_ns,
        "significant": change.significant,
    }
    moved = union.b_frame(node) if node and node < union.size_a else None
    if moved is not None and moved != frame:
        row["b_label"] = moved.label()
    return row


def _by_change(union: Union, kids: list[int], metric: str) -> list[int]:
    change = {k: abs(b - a) for k in kids for a, b in [union.values(metric, k)]}
    return sorted(kids, key=lambda k: (-change[k], k))


def diff_children(union: Union, nodes: list[int], metric: str, limit: int = 200) -> dict:
    """Children of each of ``nodes`` in the union, sorted by |B - A| of ``metric``
    (rows carry that metric only: ``a``, ``b`` inclusive; ``delta_ns`` per
    step, with ``spread_ns`` and ``significant`` as `dc_core.model.diff.Change`)."""
    out, more = {}, {}
    for node in nodes:
        union.check(node)
        kids = _by_change(union, union.children(node), metric)
        out[str(node)] = [_row(union, k, metric) for k in kids[:limit]]
        if len(kids) > limit:
            more[str(node)] = len(kids) - limit
    total_a, total_b = union.values(metric, 0)
    return {"children": out, "more": more, "total_a": total_a, "total_b": total_b}


def diff_hot_path(union: Union, metric: str, threshold: float = 0.02, limit: int = 200) -> dict:
    """Follow the child with the biggest change while it moves at least
    ``threshold`` of the larger total; rows to expand along the way."""
    total_a, total_b = union.values(metric, 0)
    floor = threshold * max(total_a, total_b, 1)
    chain, node = [0], 0
    while len(chain) < 256:
        kids = union.children(node)
        if not kids:
            break
        big = _by_change(union, kids, metric)[0]
        a, b = union.values(metric, big)
        if abs(b - a) < floor:
            break
        chain.append(big)
        node = big
    result = diff_children(union, chain[:-1] if len(chain) > 1 else chain, metric, limit)
    result.update(
        chain=chain,
        root=_row(union, 0, metric),
        a=union.a_index.ref.as_dict(),
        b=union.b_index.ref.as_dict(),
    )
    return result


def union_size(union: Union) -> int:
    """Ids of ``union`` lie in ``range(union_size(union))``."""
    return len(union)
