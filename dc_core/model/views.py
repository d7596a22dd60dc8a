"""The three views of a tree, one implementation each, shared by the terminal
report, the TensorBoard tab and the exporters:

- **top-down** is the tree itself;
- **flat**: per frame, exclusive summed over its nodes and inclusive summed over
  its nodes not nested under another node of the same frame (recursion counted
  once), as pprof's flat and cum are;
- **bottom-up**: a frame, then its callers, then theirs; each row holds the
  part of the frame's cost that flowed through that caller path (its own cost
  in ``excl`` mode, its cost with callees in ``incl`` mode).

The tab serves these a level at a time (`flat_totals`, `callers`); the report
and `--json` take a whole `View` from `view`, built from the same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .tree import Frame, Tree

#: Callers kept under a frame in a whole bottom-up tree; a deeper call path's
#: cost stays on the deepest caller shown. Inverting a call chain N deep costs
#: N nodes per node on it, so an unbounded view of a deep recursion is quadratic.
MAX_CALLERS = 64

VIEWS = ("top-down", "bottom-up", "flat")
MODES = ("excl", "incl")

#: Nodes a hot path holds at most, its start included (a call chain may be far deeper).
HOT_PATH_DEPTH = 256


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


@dataclass
class FlatTotals:
    """Per frame id: how many nodes carry it, and its flat totals per metric
    (``excl[metric][fid]``, ``incl[metric][fid]``), the root node left out."""

    nodes: list[int]
    excl: dict[str, list[int]]
    incl: dict[str, list[int]]

    def frame_ids(self) -> list[int]:
        """Frames that some node other than the root carries."""
        return [fid for fid in range(len(self.nodes)) if self.nodes[fid]]


def hot_chain(
    start: int,
    children: Callable[[int], Sequence[int]],
    value: Callable[[int], float],
    floor: float,
    depth: int = HOT_PATH_DEPTH,
) -> list[int]:
    """The hot path down the top-down view: from ``start``, the child of the
    largest ``value`` (the lower node id of a tie), then its own, while that
    value is above 0 and at least ``floor``; the nodes, ``start`` first. The
    tab's tree (inclusive values) and its all-ranks tree (means over the
    ranks) walk it alike."""
    chain, node = [start], start
    while len(chain) < depth:
        kids = children(node)
        if not kids:
            break
        heavy = max(kids, key=lambda k: (value(k), -k))
        if value(heavy) <= 0 or value(heavy) < floor:
            break
        chain.append(heavy)
        node = heavy
    return chain


def flat_totals(tree: Tree, inner: Sequence[bool] | None = None) -> FlatTotals:
    """The flat view's numbers; ``inner`` is `nested` (computed when not given)."""
    inner = nested(tree) if inner is None else inner
    count = len(tree.frames)
    nodes = [0] * count
    for fid in tree.frame[1:]:
        nodes[fid] += 1
    excl, incl = {}, {}
    for metric, column in tree.excl.items():
        e, i = [0] * count, [0] * count
        below = tree.inclusive(metric)
        for node in range(1, len(tree)):  # the root node is no frame of the user's
            fid = tree.frame[node]
            e[fid] += column[node]
            if not inner[node]:
                i[fid] += below[node]
        excl[metric], incl[metric] = e, i
    return FlatTotals(nodes, excl, incl)


@dataclass
class FlatRow:
    """One frame's flat totals."""

    frame: Frame
    excl: dict[str, int]
    incl: dict[str, int]
    nodes: int


def flat(tree: Tree) -> list[FlatRow]:
    """Flat rows, one per frame that occurs, in frame order."""
    totals = flat_totals(tree)
    return [
        FlatRow(
            tree.frames[f],
            {m: c[f] for m, c in totals.excl.items()},
            {m: c[f] for m, c in totals.incl.items()},
            totals.nodes[f],
        )
        for f in totals.frame_ids()
    ]


@dataclass
class Callers:
    """One bottom-up row below the top level: the caller frame ``frame`` and,
    per metric, the cost of the path's frame that flowed through it."""

    frame: int
    values: dict[str, int]
    nodes: int
    more: bool  # whether this caller has callers of its own


def origins(
    tree: Tree,
    fid: int,
    mode: str,
    inner: Sequence[bool],
    by_frame: Callable[[int], list[int]] | None = None,
) -> list[int]:
    """Nodes whose cost a bottom-up row of frame ``fid`` sums: all of them in
    ``excl`` mode, the outermost ones of a recursion in ``incl`` mode."""
    nodes = by_frame(fid) if by_frame else [n for n in range(1, len(tree)) if tree.frame[n] == fid]
    return [n for n in nodes if not inner[n]] if mode == "incl" else nodes


def callers(
    tree: Tree,
    path: Sequence[int],
    mode: str,
    inner: Sequence[bool],
    by_frame: Callable[[int], list[int]] | None = None,
) -> list[Callers]:
    """The rows under the bottom-up row ``path`` (a frame id, then its callers'
    frame ids, nearest first), unsorted."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    parent, frame = tree.parent, tree.frame
    positions = [(o, o) for o in origins(tree, path[0], mode, inner, by_frame)]
    for fid in path[1:]:
        positions = [
            (o, parent[c]) for o, c in positions if parent[c] > 0 and frame[parent[c]] == fid
        ]
    return [row for row, _ in _expand(tree, positions, _columns(tree, mode))]


def _columns(tree: Tree, mode: str) -> dict[str, list[int]]:
    return {m: (tree.inclusive(m) if mode == "incl" else col) for m, col in tree.excl.items()}


def _expand(
    tree: Tree, positions: list[tuple[int, int]], columns: dict[str, list[int]]
) -> list[tuple[Callers, list[tuple[int, int]]]]:
    """Group ``(origin, reached node)`` pairs by the reached node's caller frame:
    one `Callers` row per caller frame, with the pairs moved up to that caller."""
    parent, frame = tree.parent, tree.frame
    groups: dict[int, list[tuple[int, int]]] = {}
    for o, c in positions:
        if parent[c] > 0:
            groups.setdefault(frame[parent[c]], []).append((o, parent[c]))
    return [
        (
            Callers(
                fid,
                {m: sum(col[o] for o, _ in members) for m, col in columns.items()},
                len(members),
                any(parent[c] > 0 for _, c in members),
            ),
            members,
        )
        for fid, members in groups.items()
    ]


@dataclass
class View:
    """A tree to show and, per metric, what each of its rows shows.

    ``tree`` may be derived (inverted, one level); ``incl``/``excl`` are per
    node of it. Read a view through these columns, never its tree's own
    inclusive values: a flat row's inclusive is not its exclusive.
    """

    name: str
    tree: Tree
    incl: dict[str, list[int]]
    excl: dict[str, list[int]]

    def columns(self, metric: str) -> tuple[list[int], list[int]]:
        """``(inclusive, exclusive)`` of ``metric`` per node (zeros when absent)."""
        zeros = [0] * len(self.tree)
        return self.incl.get(metric, zeros), self.excl.get(metric, zeros)


def view(tree: Tree, name: str = "top-down", kinds: Iterable[str] = ()) -> View:
    """The view ``name`` of ``tree``: ``top-down``, ``bottom-up`` or ``flat``.

    ``kinds`` keeps only frames of those kinds at the top level of the flat
    and bottom-up views (bottom-up then counts their inclusive cost).
    """
    if name == "top-down":
        return View(name, tree, {m: tree.inclusive(m) for m in tree.excl}, dict(tree.excl))
    if name == "flat":
        return _flat_view(tree, set(kinds))
    if name == "bottom-up":
        inverted = bottom_up(tree, "incl" if kinds else "excl", kinds)
        incl = {m: inverted.inclusive(m) for m in inverted.excl}
        return View(name, inverted, incl, incl)
    raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {name!r}")


def _flat_view(tree: Tree, kinds: set[str]) -> View:
    """One row per frame under the root: node ``i + 1`` is ``fids[i]``."""
    totals = flat_totals(tree)
    fids = [f for f in totals.frame_ids() if not kinds or tree.frames[f].kind in kinds]
    out = Tree()
    for fid in fids:
        out.child(0, tree.frames[fid])
    excl = {m: [0, *(column[f] for f in fids)] for m, column in totals.excl.items()}
    incl = {m: [tree.total(m), *(column[f] for f in fids)] for m, column in totals.incl.items()}
    for metric, column in excl.items():
        out.excl[metric] = list(column)
        out.units[metric] = tree.units.get(metric, "")
    return View("flat", out, incl, excl)


def bottom_up(
    tree: Tree,
    mode: str = "excl",
    kinds: Iterable[str] = (),
    max_callers: int = MAX_CALLERS,
    max_nodes: int | None = None,
) -> Tree:
    """The whole bottom-up view as a tree: top level = frames, children = their callers.

    Built from `flat_totals` and `callers`, as the tab expands it a level at a
    time. A node's inclusive value is what its row shows. Bounded in time and
    memory: a path stops after ``max_callers`` callers, and once the view holds
    ``max_nodes`` nodes (default four per node of ``tree``) no caller is added;
    every top-level total stays exact (the rest stays on the deepest caller).
    """
    budget = 4 * len(tree) + 1024 if max_nodes is None else max_nodes
    wanted = set(kinds)
    inner = nested(tree)
    by_frame: dict[int, list[int]] = {}
    for node in range(1, len(tree)):
        by_frame.setdefault(tree.frame[node], []).append(node)
    totals = flat_totals(tree, inner)
    top = totals.incl if mode == "incl" else totals.excl
    out = Tree()
    for metric, unit in tree.units.items():
        out.units[metric] = unit
    columns = _columns(tree, mode)
    queue: list[
        tuple[int, int, list[tuple[int, int]]]
    ] = []  # (view node, callers so far, positions)
    for fid in totals.frame_ids():
        if wanted and tree.frames[fid].kind not in wanted:
            continue
        values = {m: col[fid] for m, col in top.items() if col[fid]}
        if values:
            starts = origins(tree, fid, mode, inner, by_frame.__getitem__)
            queue.append((_place(out, 0, tree.frames[fid], values), 0, [(o, o) for o in starts]))
    while queue:
        node, depth, positions = queue.pop()
        if depth >= max_callers:
            continue
        for row, moved in _expand(tree, positions, columns):
            values = {m: v for m, v in row.values.items() if v}
            if not values or len(out) >= budget:
                continue
            child = _place(out, node, tree.frames[row.frame], values)
            for (
                metric,
                value,
            ) in values.items():  # the caller's share leaves its callee's own column
                out.add(node, metric, -value)
            if row.more:
                queue.append((child, depth + 1, moved))
    for metric in tree.excl:
        out.excl.setdefault(metric, [0] * len(out))
    return out


def _place(out: Tree, parent: int, frame: Frame, values: dict[str, int]) -> int:
    node = out.child(parent, frame)
    for metric, value in values.items():
        out.add(node, metric, value)
    return node
