"""One node in depth, search, and the flame graph's visible part.

All functions take an `Index` and plain values and return JSON-ready data.
"""

from __future__ import annotations

import heapq
from operator import attrgetter

import numpy as np  # a TensorBoard dependency

from ..analyzer import findings_of
from ..model.kinds import CONTEXT_KINDS, KINDS
from .shape import Levels
from .store import Index
from .tables import frame_fields, node_row, total

#: Path entries one search answer carries at most: a match in a deep recursion
#: has a path as long as the recursion, and an answer holds up to 500 matches.
MAX_PATH_ENTRIES = 100_000


def _context_ids(index: Index) -> tuple[np.ndarray, np.ndarray]:
    """Per node of a context kind: an id of its context path (the context
    frames under its phase: Python lines, modules, compiled regions; backward
    flag ignored), 0 for other nodes; and per node its phase node (-1 if none).

    Two nodes with the same context id are the same line of model code reached
    in different phases, e.g. a layer forward and the same layer backward.
    """
    role = _ROLES[index.kind_codes()]
    cid = _context_frames(index, role)
    levels = index.levels()
    if levels.levels is None:
        ctx, phase = _context_ids_loop(index, cid.tolist(), role.tolist())
    else:
        ctx, phase = _context_ids_by_level(index, levels, cid, role)
    return np.where(role[index.frame_array()] == 1, ctx, 0), phase


#: Per kind (in `KINDS` order, then one for a kind outside it): 0 a phase,
#: 1 a context kind, 2 anything else.
_ROLES = np.array(
    [0 if k == "phase" else 1 if k in CONTEXT_KINDS else 2 for k in KINDS] + [2], dtype=np.int64
)


def _context_frames(index: Index, role: np.ndarray) -> np.ndarray:
    """Per frame id, an id that ignores the backward flag: the frame's own id,
    or its forward twin's for a backward context frame that has one."""
    frames = index.tree.frames
    cid = np.arange(len(frames), dtype=np.int64)
    backward = np.fromiter(map(attrgetter("backward"), frames), dtype=bool, count=len(frames))
    flagged = np.flatnonzero(backward & (role == 1)).tolist()
    # the usual case: context frames are not flagged, only operators run by autograd
    if not flagged:
        return cid
    key = attrgetter("kind", "name", "file", "line", "detail")
    wanted = {key(frames[f]): f for f in flagged}
    for f in np.flatnonzero(~backward & (role == 1)).tolist():
        twin = wanted.get(key(frames[f]))
        if twin is not None:
            cid[twin] = f
    return cid


def _context_ids_by_level(
    index: Index, levels: Levels, cid: np.ndarray, role: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Context ids (of every node: others carry their context's) a depth level at a time."""
    tree = index.tree
    n, frame, parent = len(tree), index.frame_array(), levels.parent
    ctx, phase = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    width = int(cid.max(initial=0)) + 1
    # key -> context id, sorted by key
    known, ids = (
        np.empty(0, dtype=np.int64),
        np.empty(0, dtype=np.int64),
    )
    for nodes in levels.levels:  # parents' ids are final before their children's are made
        up = parent[nodes]
        r = role[frame[nodes]]
        ctx[nodes], phase[nodes] = ctx[up], phase[up]
        phases = nodes[r == 0]
        ctx[phases], phase[phases] = 0, phases
        inner = nodes[r == 1]
        if not inner.size:
            continue
        # The same (context above, frame) pair may recur at another depth (under
        # an operator, say): ids are looked up across levels, not per level.
        keys, where = np.unique(ctx[parent[inner]] * width + cid[frame[inner]], return_inverse=True)
        at = np.searchsorted(known, keys)
        found = at < len(known)
        found[found] = known[at[found]] == keys[found]
        value = np.empty(len(keys), dtype=np.int64)
        value[found] = ids[at[found]]
        fresh = ~found
        value[fresh] = np.arange(len(known) + 1, len(known) + 1 + int(fresh.sum()))
        ctx[inner] = value[where]
        known, ids = np.concatenate([known, keys[fresh]]), np.concatenate([ids, value[fresh]])
        order = np.argsort(known, kind="stable")
        known, ids = known[order], ids[order]
    return ctx, phase


def _context_ids_loop(
    index: Index, cid: list[int], role: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """`_context_ids` one node at a time, for trees too deep for level passes."""
    tree = index.tree
    frame, parent = tree.frame, tree.parent
    keys: dict[tuple[int, int], int] = {}
    n = len(tree)
    ctx, phase = [0] * n, [-1] * n
    for node in index.order():
        if node == 0:
            continue
        p, fid = parent[node], frame[node]
        r = role[fid]
        if r == 0:
            phase[node] = node
        elif r == 1:
            key = (ctx[p], cid[fid])
            value = keys.get(key)
            if value is None:
                value = keys[key] = len(keys) + 1
            ctx[node], phase[node] = value, phase[p]
        else:
            ctx[node], phase[node] = ctx[p], phase[p]
    return np.array(ctx, dtype=np.int64), np.array(phase, dtype=np.int64)


def phase_split(index: Index, node: int) -> dict | None:
    """Forward vs backward (and other phases) of the context ``node`` belongs to."""
    tree = index.tree
    context = node
    while context > 0 and tree.node_frame(context).kind not in CONTEXT_KINDS:
        context = tree.parent[context]
    if context <= 0:
        return None
    ctx, phase = index.memo(("context",), lambda: _context_ids(index))
    members = np.flatnonzero(ctx == ctx[context]).tolist()
    phase_of = phase[members].tolist()
    incl = {m: index.incl(m) for m in index.metrics}
    phases: dict[str, dict] = {}
    for member, at in zip(members, phase_of):
        name = tree.node_frame(at).name if at > 0 else "other"
        entry = phases.setdefault(
            name, {"phase": name, "nodes": [], "incl": dict.fromkeys(index.metrics, 0)}
        )
        entry["nodes"].append(member)
        for m, column in incl.items():
            entry["incl"][m] += column[member]
    return {
        "context": node_row(index, context)["label"],
        "context_node": context,
        "phases": list(phases.values()),
    }


def node_details(index: Index, node: int, metric: str) -> dict:
    """Everything the details panel shows about ``node``."""
    tree = index.tree
    path = [
        {"id": n, "label": index.label(tree.frame[n]), "kind": tree.node_frame(n).kind}
        for n in tree.path(node)
    ]
    findings = [f for f in findings_of(index.profile) if f.get("node", -1) == node]
    return {
        "node": node_row(index, node),
        "path": path,
        "split": phase_split(index, node),
        "findings": findings,
        "total": total(index, metric),
    }


def search(index: Index, query: str, metric: str, limit: int = 50) -> dict:
    """Nodes whose frame label or name contains ``query`` (case-insensitive),
    heaviest first, each with the node path to reveal it in the tree."""
    needle = query.lower()
    lowered = index.memo(
        ("lower_labels",),
        lambda: [
            f"{label}\n{frame.name}\n{frame.file}".lower()
            for label, frame in zip(index.labels(), index.tree.frames)
        ],
    )
    fids = {f for f in range(1, len(lowered)) if needle in lowered[f]}
    frame = index.tree.frame
    nodes = [n for n in range(1, len(frame)) if frame[n] in fids]
    incl = index.incl(metric)
    nodes.sort(key=lambda n: (-incl[n], n))
    matches, budget = [], MAX_PATH_ENTRIES
    for n in nodes[:limit]:
        path = index.tree.path(n)
        budget -= len(path)
        if budget < 0 and matches:  # the rest of the matches are left out, as past ``limit``
            break
        matches.append(
            {
                "id": n,
                "label": index.label(frame[n]),
                "kind": index.tree.node_frame(n).kind,
                "incl": incl[n],
                "path": path,
            }
        )
    return {
        "query": query,
        "count": len(nodes),
        "frames": len(fids),
        "matches": matches,
        "total": total(index, metric),
    }


def flame(
    index: Index, root: int, metric: str, min_fraction: float = 0.002, max_nodes: int = 3000
) -> dict:
    """The heaviest connected part of the subtree under ``root``: at most
    ``max_nodes`` nodes, none under ``min_fraction`` of ``root``'s value.

    Nodes come in preorder, children heaviest first, so the client lays out an
    icicle by walking the list once. Each carries ``id``, ``parent`` (-1 for
    ``root``), ``incl`` and ``excl`` of ``metric`` (scalars, as in `search`),
    ``label``, ``kind`` and ``backward``.
    """
    tree = index.tree
    incl, excl = index.incl(metric), index.excl(metric)
    base = incl[root]
    floor = max(base * min_fraction, 1)
    chosen = set()
    heap = [(-base, root)] if base > 0 else []
    while heap and len(chosen) < max_nodes:
        value, node = heapq.heappop(heap)
        chosen.add(node)
        for kid in index.children(node):
            if incl[kid] >= floor:
                heapq.heappush(heap, (-incl[kid], kid))
    nodes = []
    stack = [(root, -1)] if chosen else []
    while stack:
        node, up = stack.pop()
        fields = frame_fields(index, tree.frame[node])
        label = node_row(index, node)["label"] if node == 0 else fields["label"]
        nodes.append(
            {
                "id": node,
                "parent": up,
                "incl": incl[node],
                "excl": excl[node],
                "label": label,
                "kind": fields["kind"],
                "backward": fields["backward"],
            }
        )
        kids = sorted((k for k in index.children(node) if k in chosen), key=lambda k: (incl[k], -k))
        stack.extend((k, node) for k in kids)  # heaviest popped first
    ancestors = [{"id": n, "label": index.label(tree.frame[n])} for n in tree.path(root)[:-1]]
    return {
        "root": root,
        "nodes": nodes,
        "ancestors": ancestors,
        "total": total(index, metric),
        "truncated": len(chosen) >= max_nodes,
    }
