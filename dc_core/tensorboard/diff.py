"""Two profiles as one delta tree: nodes matched by call path, biggest change first.

The union tree keeps profile A's node ids (so a node picked in A's tree is
the same id here); a call path only B has is ``len(A) + its node id in B``.
Ids are thus fixed by the two files alone, and the union is matched lazily:
only the levels a request expands are paired by frame, so a first diff of
two 100k-node windows costs what its rows cost, not a walk of both trees.
"""

from __future__ import annotations

from ..model.tree import Frame
from .params import NotFound
from .store import Index


class Union:
    """A and B merged by call path; ids as the module says.

    Safe to share between request threads without a lock: the lazily filled
    maps only gain entries (one dict store each, atomic in CPython), and
    racing requests compute the same value.
    """

    def __init__(self, a_index: Index, b_index: Index) -> None:
        self.a_index, self.b_index = a_index, b_index
        self.size_a = len(a_index)
        self._b_of: dict[int, int] = {0: 0}  # A node -> B node, -1 where B lacks the path
        self._a_of: dict[int, int] = {0: 0}  # B node -> A node, -1 where A lacks the path
        self._by_frame: dict[tuple[int, int], dict[Frame, int]] = {}
        self._kids: dict[int, list[int]] = {}  # union children of A's nodes

    def __len__(self) -> int:
        return self.size_a + len(self.b_index)

    # --- matching ---------------------------------------------------------
    def _kids_by_frame(self, side: int, node: int) -> dict[Frame, int]:
        """Children of ``node`` in A (side 0) or B (1), keyed by frame. (Keyed
        by the frames themselves: keys made per child, as tuples, would keep
        tens of thousands of new objects alive and wake the cyclic garbage
        collector over every loaded profile mid-request.)"""
        key = (side, node)
        found = self._by_frame.get(key)
        if found is None:
            index = self.b_index if side else self.a_index
            tree = index.tree
            frames, frame = tree.frames, tree.frame
            found = self._by_frame[key] = {frames[frame[k]]: k for k in index.children(node)}
        return found

    def _match(self, side: int, node: int) -> int:
        """The other profile's node on the call path of ``node`` (of A when
        ``side`` is 0, of B when 1), or -1; walks up to the nearest known node."""
        known = self._a_of if side else self._b_of
        tree = (self.b_index if side else self.a_index).tree
        path = []
        while node not in known:
            path.append(node)
            node = tree.parent[node]
        other = known[node]
        for node in reversed(path):
            if other >= 0:
                other = self._kids_by_frame(1 - side, other).get(tree.node_frame(node), -1)
            known[node] = other
        return other

    def b_node(self, node: int) -> int:
        """B's node of union ``node``, -1 where B lacks the path."""
        return self._match(0, node) if node < self.size_a else node - self.size_a

    def check(self, node: int) -> None:
        """Raise `NotFound` for an id in range that names no union node (a B
        path that A also has goes by A's id)."""
        if node >= self.size_a and self._match(1, node - self.size_a) >= 0:
            raise NotFound(f"node {node} is not in this diff")

    # --- reading ----------------------------------------------------------
    def frame(self, node: int) -> Frame:
        if node < self.size_a:
            return self.a_index.tree.node_frame(node)
        return self.b_index.tree.node_frame(node - self.size_a)

    def children(self, node: int) -> list[int]:
        """A's children (A's ids), then B's children A lacks (B-only ids)."""
        if node >= self.size_a:
            return [self.size_a + k for k in self.b_index.children(node - self.size_a)]
        kids = self._kids.get(node)
        if kids is None:
            kids = list(self.a_index.children(node))
            b = self.b_node(node)
            if b >= 0:
                in_a = self._kids_by_frame(0, node)
                kids += [self.size_a + k for frame, k in self._kids_by_frame(1, b).items() if frame not in in_a]
            self._kids[node] = kids
        return kids

    def values(self, metric: str, node: int) -> tuple[int, int]:
        """Inclusive ``metric`` of ``node`` in A and in B (0 where absent)."""
        a = self.a_index.incl(metric)[node] if node < self.size_a else 0
        b = self.b_node(node)
        return a, (self.b_index.incl(metric)[b] if b >= 0 else 0)


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
    return {"id": node, "kind": frame.kind, "label": frame.label() if node else "A vs B", "name": frame.name,
            "file": frame.file, "line": frame.line, "backward": frame.backward, "a": a, "b": b,
            "in_a": node < union.size_a, "in_b": union.b_node(node) >= 0, "kids": len(union.children(node))}


def _by_change(union: Union, kids: list[int], metric: str) -> list[int]:
    change = {k: abs(b - a) for k in kids for a, b in [union.values(metric, k)]}
    return sorted(kids, key=lambda k: (-change[k], k))


def diff_children(union: Union, nodes: list[int], metric: str, limit: int = 200) -> dict:
    """Children of each of ``nodes`` in the union, sorted by |B - A| of ``metric``
    (rows carry that metric only: ``a``, ``b`` inclusive)."""
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
    result.update(chain=chain, root=_row(union, 0, metric),
                  a=union.a_index.ref.as_dict(), b=union.b_index.ref.as_dict())
    return result


def union_size(union: Union) -> int:
    return len(union)
