"""Two profiles as one delta tree: nodes matched by call path, biggest change first.

The union tree keeps profile A's node ids (so a node picked in A's tree is
the same id here) and appends the call paths only B has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.tree import Frame
from .store import Children, Index


@dataclass
class Union:
    """A and B merged by call path; ``a[m]``/``b[m]`` are inclusive per union node."""

    a_index: Index
    b_index: Index
    frames: list[Frame]
    parent: list[int]
    frame: list[int]  # union frame id per union node
    b_node: list[int]  # B's node per union node, -1 where B lacks the path
    _kids: Children | None = None
    _values: dict = field(default_factory=dict)

    def children(self, node: int) -> list[int]:
        if self._kids is None:
            self._kids = Children(self.parent)
        return self._kids(node)

    def values(self, metric: str) -> tuple[list[int], list[int]]:
        cached = self._values.get(metric)
        if cached is None:
            n = len(self.parent)
            a = self.a_index.incl(metric) + [0] * (n - len(self.a_index))
            b_incl = self.b_index.incl(metric)
            b = [b_incl[j] if j >= 0 else 0 for j in self.b_node]
            cached = self._values[metric] = (a, b)
        return cached


def build_union(a: Index, b: Index) -> Union:
    ta, tb = a.tree, b.tree
    ids = {f: i for i, f in enumerate(ta.frames)}
    fmap = [ids.setdefault(f, len(ids)) for f in tb.frames]
    frames = list(ids)  # A's frames, then those only B has
    parent, frame = list(ta.parent), list(ta.frame)
    keys = {(p, f): node for node, (p, f) in enumerate(zip(ta.parent, ta.frame))}
    b_node = [-1] * len(parent)
    b_node[0] = 0
    where = [0] * len(tb)
    for j in b.order():
        if j == 0:
            continue
        key = (where[tb.parent[j]], fmap[tb.frame[j]])
        u = keys.get(key)
        if u is None:
            u = keys[key] = len(parent)
            parent.append(key[0])
            frame.append(key[1])
            b_node.append(-1)
        b_node[u] = j
        where[j] = u
    return Union(a, b, frames, parent, frame, b_node)


def union_of(a: Index, b: Index) -> Union:
    """The cached union of ``a`` and ``b`` (the value keeps ``b`` alive, so its
    id in the key cannot be reused while the entry exists)."""
    return a.memo(("diff", b.ref, id(b)), lambda: build_union(a, b))


def _row(union: Union, node: int, metric: str) -> dict:
    frame = union.frames[union.frame[node]]
    a, b = union.values(metric)
    return {"id": node, "kind": frame.kind, "label": frame.label() if node else "A vs B", "name": frame.name,
            "file": frame.file, "line": frame.line, "backward": frame.backward, "a": a[node], "b": b[node],
            "in_a": node < len(union.a_index), "in_b": union.b_node[node] >= 0, "kids": len(union.children(node))}


def diff_children(union: Union, nodes: list[int], metric: str, limit: int = 200) -> dict:
    """Children of each of ``nodes`` in the union, sorted by |B - A| of ``metric``
    (rows carry that metric only: ``a``, ``b`` inclusive)."""
    a, b = union.values(metric)
    out, more = {}, {}
    for node in nodes:
        kids = sorted(union.children(node), key=lambda k: (-abs(b[k] - a[k]), k))
        out[str(node)] = [_row(union, k, metric) for k in kids[:limit]]
        if len(kids) > limit:
            more[str(node)] = len(kids) - limit
    return {"children": out, "more": more, "total_a": a[0], "total_b": b[0]}


def diff_hot_path(union: Union, metric: str, threshold: float = 0.02, limit: int = 200) -> dict:
    """Follow the child with the biggest change while it moves at least
    ``threshold`` of the larger total; rows to expand along the way."""
    a, b = union.values(metric)
    floor = threshold * max(a[0], b[0], 1)
    chain, node = [0], 0
    while len(chain) < 256:
        kids = union.children(node)
        if not kids:
            break
        big = max(kids, key=lambda k: (abs(b[k] - a[k]), -k))
        if abs(b[big] - a[big]) < floor:
            break
        chain.append(big)
        node = big
    result = diff_children(union, chain[:-1] if len(chain) > 1 else chain, metric, limit)
    result.update(chain=chain, root=_row(union, 0, metric),
                  a=union.a_index.ref.as_dict(), b=union.b_index.ref.as_dict())
    return result


def union_size(union: Union) -> int:
    return len(union.parent)
