"""The "All ranks" view: one window's ranks merged into one tree
(`dc_core.ensemble.Ensemble`), each node with the spread of a metric over
the ranks (mean, max, the rank holding the max, imbalance), a node's
distribution over the ranks, and a node found again in one rank's own tree.

Functions take an ensemble (or an `Index`) and plain values and return
JSON-ready data; values are inclusive, a rank lacking a node counts 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np  # a TensorBoard dependency

from ..ensemble import Ensemble
from ..model.tree import Frame, frame_json
from ..model.views import hot_chain
from ..model.window import steps_text
from .store import Index

SORTS = ("mean", "max", "imbalance", "name")
#: Histogram bins of a node's distribution at most (fewer with fewer ranks).
MAX_BINS = 20


def spread_row(e: Ensemble, node: int, metric: str) -> dict:
    """One node: identity, and ``metric``'s spread over the ranks."""
    frame = e.node_frame(node)
    s = e.stats(metric)
    top = int(s.argmax[node])
    values = e.values(metric, node)
    column = e.columns[top] if e.columns else None
    label = frame.label()
    if node == 0:
        steps = e.columns[0].steps if e.columns else (0, 0)
        label = f"{steps_text(steps)}, {len(e.columns)} ranks"
    return {
        "id": node,
        **frame_json(frame),
        "label": label,
        "mean": float(s.mean[node]),
        "max": int(s.max[node]),
        "min": int(s.min[node]),
        "sum": float(s.sum[node]),
        "max_rank": column.rank if column else None,
        "max_host": column.host if column else "",
        "imbalance": float(s.imbalance[node]),
        "present": int(np.count_nonzero(values)),
        "kids": len(e.children(node)),
    }


def _sort_key(e: Ensemble, metric: str, sort: str) -> Callable[[int], tuple]:
    if sort == "name":
        return lambda n: (e.node_frame(n).label().lower(), n)
    column = getattr(e.stats(metric), sort)
    return lambda n: (-float(column[n]), n)


def spread_children(
    e: Ensemble, nodes: Sequence[int], metric: str, sort: str = "mean", limit: int = 200
) -> dict:
    """Rows of the children of each of ``nodes``, ordered by ``sort`` (largest
    first): ``{"children": {node: rows}, "more": {node: n}, "total": root mean}``."""
    key = _sort_key(e, metric, sort)
    out, more = {}, {}
    for node in nodes:
        kids = sorted(e.children(node), key=key)
        out[str(node)] = [spread_row(e, k, metric) for k in kids[:limit]]
        if len(kids) > limit:
            more[str(node)] = len(kids) - limit
    return {"children": out, "more": more, "total": float(e.stats(metric).mean[0])}


def spread_hot_path(
    e: Ensemble, metric: str, threshold: float = 0.05, sort: str = "mean", limit: int = 200
) -> dict:
    """Follow the child with the largest mean while it holds at least
    ``threshold`` of the root's; the chain and the rows to open along it."""
    mean = e.stats(metric).mean
    chain = hot_chain(0, e.children, mean.__getitem__, threshold * mean[0])
    result = spread_children(e, chain[:-1] if len(chain) > 1 else chain, metric, sort, limit)
    result.update(chain=chain, root=spread_row(e, 0, metric), ranks=[c.rank for c in e.columns])
    return result


def spread_search(e: Ensemble, query: str, metric: str, limit: int = 50) -> dict:
    """Nodes of the merged tree whose label, name or file contains ``query``
    (case-insensitive), largest mean first, each with its node path; the
    shape of the single-rank ``/search`` answer, so one search box serves both."""
    needle = query.lower()
    hit = [needle in f"{f.label()}\n{f.name}\n{f.file}".lower() for f in e.frames]
    nodes = [n for n in range(1, len(e)) if hit[e.frame[n]]]
    mean = e.stats(metric).mean
    nodes.sort(key=lambda n: (-float(mean[n]), n))
    matches = [
        {
            "id": n,
            "label": e.node_frame(n).label(),
            "kind": e.node_frame(n).kind,
            "incl": float(mean[n]),
            "path": e.path(n),
        }
        for n in nodes[:limit]
    ]
    return {
        "query": query,
        "count": len(nodes),
        "frames": sum(hit[1:]),
        "matches": matches,
        "total": float(mean[0]),
    }


def distribution(e: Ensemble, node: int, metric: str, bins: int = MAX_BINS) -> dict:
    """``node``'s ``metric`` on every rank: the values (in rank order), a
    histogram of ``min(bins, ranks)`` equal-width bins from the smallest value
    to the largest (the last bin holds its upper edge), and the node's call
    path, which `locate` finds again in one rank's tree."""
    values = e.values(metric, node).astype(np.int64)
    count = len(values)
    lo, hi = (int(values.min()), int(values.max())) if count else (0, 0)
    if hi == lo:
        histogram = [{"lo": lo, "hi": hi, "count": count}] if count else []
    else:
        edges = np.linspace(lo, hi, min(bins, count) + 1)
        counts, _ = np.histogram(values, bins=edges)
        histogram = [
            {"lo": float(edges[i]), "hi": float(edges[i + 1]), "count": int(c)}
            for i, c in enumerate(counts)
        ]
    path = e.path(node)
    return {
        "node": spread_row(e, node, metric),
        "metric": metric,
        "ranks": [c.rank for c in e.columns],
        "hosts": [c.host for c in e.columns],
        "values": values.tolist(),
        "bins": histogram,
        "path": [
            {"id": n, "label": e.node_frame(n).label(), "kind": e.node_frame(n).kind} for n in path
        ],
    }


def follow(
    frames: Sequence[Frame], children: Callable[[int], list[int]], frame_of: Callable[[int], Frame]
) -> list[int]:
    """Nodes from the root down along ``frames`` (a call path), as far as the
    tree has them: fewer nodes than frames when it lacks the rest."""
    path, node = [], 0
    for frame in frames:
        node = next((k for k in children(node) if frame_of(k) == frame), -1)
        if node < 0:
            break
        path.append(node)
    return path


def ensemble_path(e: Ensemble, node: int) -> list[Frame]:
    """The frames of ``node``'s call path in the ensemble."""
    return [e.node_frame(n) for n in e.path(node)]


def locate(index: Index, frames: Sequence[Frame]) -> dict:
    """The node of one rank's tree on the call path ``frames``, or the deepest
    node it has on it (``exact`` False; node 0 when none)."""
    tree = index.tree
    path = follow(frames, index.children, tree.node_frame)
    return {
        "node": path[-1] if path else 0,
        "path": path,
        "exact": len(path) == len(frames),
        **index.ref.as_dict(),
    }
