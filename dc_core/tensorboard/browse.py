"""One node in depth, search, and the flame graph's visible part.

All functions take an `Index` and plain values and return JSON-ready data.
"""

from __future__ import annotations

import heapq

from ..model.kinds import CONTEXT_KINDS
from .store import Index
from .tables import frame_fields, node_row, total

#: Path entries one search answer carries at most: a match in a deep recursion
#: has a path as long as the recursion, and an answer holds up to 500 matches.
MAX_PATH_ENTRIES = 100_000


def _context_ids(index: Index) -> tuple[list[int], list[int]]:
    """Per node: an id of its context path (the context frames under its
    phase: Python lines, modules, compiled regions; backward flag ignored) and
    its phase node (-1 if none).

    Two nodes with the same context id are the same line of model code reached
    in different phases, e.g. a layer forward and the same layer backward.
    """
    tree = index.tree
    frames, frame, parent = tree.frames, tree.frame, tree.parent
    identity: dict[tuple, int] = {}
    cid = [identity.setdefault((f.kind, f.name, f.file, f.line, f.detail), len(identity)) for f in frames]
    role = [0 if f.kind == "phase" else 1 if f.kind in CONTEXT_KINDS else 2 for f in frames]
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
    return ctx, phase


def _context_members(index: Index) -> dict[int, list[int]]:
    ctx, _ = index.memo(("context",), lambda: _context_ids(index))
    frames, frame = index.tree.frames, index.tree.frame
    out: dict[int, list[int]] = {}
    for node, key in enumerate(ctx):
        if key and frames[frame[node]].kind in CONTEXT_KINDS:
            out.setdefault(key, []).append(node)
    return out


def phase_split(index: Index, node: int) -> dict | None:
    """Forward vs backward (and other phases) of the context ``node`` belongs to."""
    tree = index.tree
    context = node
    while context > 0 and tree.node_frame(context).kind not in CONTEXT_KINDS:
        context = tree.parent[context]
    if context <= 0:
        return None
    ctx, phase = index.memo(("context",), lambda: _context_ids(index))
    members = index.memo(("context_members",), lambda: _context_members(index))[ctx[context]]
    phases: dict[str, dict] = {}
    for member in members:
        name = tree.node_frame(phase[member]).name if phase[member] > 0 else "other"
        entry = phases.setdefault(name, {"phase": name, "nodes": [], "incl": dict.fromkeys(index.metrics, 0)})
        entry["nodes"].append(member)
        for m in index.metrics:
            entry["incl"][m] += index.incl(m)[member]
    return {"context": node_row(index, context)["label"], "context_node": context, "phases": list(phases.values())}


def node_details(index: Index, node: int, metric: str) -> dict:
    """Everything the details panel shows about ``node``."""
    tree = index.tree
    path = [{"id": n, "label": index.labels()[tree.frame[n]], "kind": tree.node_frame(n).kind} for n in tree.path(node)]
    findings = [f for f in index.profile.findings if f.get("node", -1) == node]
    return {"node": node_row(index, node), "path": path, "split": phase_split(index, node),
            "findings": findings, "total": total(index, metric)}


def search(index: Index, query: str, metric: str, limit: int = 50) -> dict:
    """Nodes whose frame label or name contains ``query`` (case-insensitive),
    heaviest first, each with the node path to reveal it in the tree."""
    needle = query.lower()
    lowered = index.memo(("lower_labels",), lambda: [
        f"{label}\n{frame.name}\n{frame.file}".lower() for label, frame in zip(index.labels(), index.tree.frames)
    ])
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
        matches.append({"id": n, "label": index.labels()[frame[n]], "kind": index.tree.node_frame(n).kind,
                        "incl": incl[n], "path": path})
    return {"query": query, "count": len(nodes), "frames": len(fids), "matches": matches,
            "total": total(index, metric)}


def flame(index: Index, root: int, metric: str, min_fraction: float = 0.002, max_nodes: int = 3000) -> dict:
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
        nodes.append({"id": node, "parent": up, "incl": incl[node], "excl": excl[node], "label": label,
                      "kind": fields["kind"], "backward": fields["backward"]})
        kids = sorted((k for k in index.children(node) if k in chosen), key=lambda k: (incl[k], -k))
        stack.extend((k, node) for k in kids)  # heaviest popped first
    ancestors = [{"id": n, "label": index.labels()[tree.frame[n]]} for n in tree.path(root)[:-1]]
    return {"root": root, "nodes": nodes, "ancestors": ancestors, "total": total(index, metric),
            "truncated": len(chosen) >= max_nodes}
