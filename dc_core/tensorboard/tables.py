"""Tree tables, served a level at a time: top-down children, the hot path,
flat (by frame) and bottom-up (callers of a frame).

A 100k-node profile is never sent whole: each function returns the rows one
expansion needs, sorted by the selected metric and capped at ``limit``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np  # a TensorBoard dependency

from ..model import views
from ..model.kinds import KINDS
from ..model.tree import frame_json
from ..model.window import window_label
from .params import format_window
from .store import Children, Index

SORTS = ("incl", "excl", "name")


def frame_fields(index: Index, fid: int) -> dict:
    """Frame ``fid`` as the tables' rows show it: `frame_json` and its label."""
    return {**frame_json(index.tree.frames[fid]), "label": index.label(fid)}


def node_row(index: Index, node: int) -> dict:
    """One node as the tables show it: identity, all metrics, child count."""
    row = {"id": node, **frame_fields(index, index.tree.frame[node])}
    if node == 0:
        p = index.profile
        row["label"] = window_label(index.ref.window, p.step_times_ns, p.planned_window)
    row["excl"] = {m: index.excl(m)[node] for m in index.metrics}
    row["incl"] = {m: index.incl(m)[node] for m in index.metrics}
    row["kids"] = len(index.children(node))
    return row


def _sort_key(index: Index, metric: str, sort: str):
    if sort == "name":
        label, frame = index.label, index.tree.frame
        return lambda n: (label(frame[n]).lower(), n)
    column = index.incl(metric) if sort == "incl" else index.excl(metric)
    return lambda n: (-column[n], n)


def children(
    index: Index, nodes: Iterable[int], metric: str, sort: str = "incl", limit: int = 200
) -> dict:
    """Rows of the children of each of ``nodes``: ``{"children": {node: rows}, "more": {node: n}}``."""
    key = _sort_key(index, metric, sort)
    out, more = {}, {}
    for node in nodes:
        kids = sorted(index.children(node), key=key)
        out[str(node)] = [node_row(index, k) for k in kids[:limit]]
        if len(kids) > limit:
            more[str(node)] = len(kids) - limit
    return {"children": out, "more": more, "total": total(index, metric)}


def total(index: Index, metric: str) -> int:
    """The window's total of ``metric`` (the root's inclusive value)."""
    return index.total(metric)


def hot_path(
    index: Index,
    start: int,
    metric: str,
    threshold: float = 0.05,
    sort: str = "incl",
    limit: int = 200,
) -> dict:
    """Follow the heaviest child from ``start`` while it holds at least
    ``threshold`` of the window total; returns the chain and the children of
    every node to expand along it (so the table opens in one round trip)."""
    incl = index.incl(metric)
    chain = views.hot_chain(start, index.children, incl.__getitem__, threshold * incl[0])
    expand = chain[:-1] if len(chain) > 1 else chain
    result = children(index, expand, metric, sort, limit)
    result.update(chain=chain, root=node_row(index, start))
    return result


def _nested(index: Index) -> list[bool]:
    def build() -> list[bool]:
        flags = index.levels().nested(index.frame_array())
        return flags.tolist() if flags is not None else views.nested(index.tree, index.children)

    return index.memo(("nested",), build)


def _flat_totals(index: Index) -> views.FlatTotals:
    """`views.flat_totals`, in numpy for trees `shape.Levels` can handle (the
    tests hold the two to the same numbers)."""

    def build() -> views.FlatTotals:
        levels = index.levels()
        if levels.levels is None:
            return views.flat_totals(index.tree, _nested(index))
        size = len(index.tree.frames)
        frame = index.frame_array()[1:]  # the root node is no frame of the user's
        outer = ~np.asarray(_nested(index), dtype=bool)[1:]
        excl, incl = {}, {}
        for metric, column in index.tree.excl.items():
            e = np.zeros(size, dtype=np.int64)
            np.add.at(e, frame, np.asarray(column, dtype=np.int64)[1:])
            i = np.zeros(size, dtype=np.int64)
            np.add.at(i, frame[outer], index.incl_array(metric)[1:][outer])
            excl[metric], incl[metric] = e.tolist(), i.tolist()
        return views.FlatTotals(np.bincount(frame, minlength=size).tolist(), excl, incl)

    return index.memo(("flat",), build)


def _frame_row(index: Index, fid: int, totals: views.FlatTotals, **extra) -> dict:
    return {
        "id": fid,
        **frame_fields(index, fid),
        "excl": {m: c[fid] for m, c in totals.excl.items()},
        "incl": {m: c[fid] for m, c in totals.incl.items()},
        **extra,
    }


def flat(
    index: Index,
    metric: str,
    sort: str = "excl",
    kinds: Iterable[str] = (),
    limit: int = 200,
    offset: int = 0,
) -> dict:
    """Frames with their totals over the whole window, heaviest first."""
    totals = _flat_totals(index)
    ids = np.flatnonzero(np.asarray(totals.nodes) > 0)
    if kinds:
        wanted = [KINDS.index(k) for k in kinds if k in KINDS]
        ids = ids[np.isin(index.kind_codes()[ids], wanted)]
    if sort == "name":
        labels = index.labels()
        page = sorted(ids.tolist(), key=lambda f: (labels[f].lower(), f))[offset : offset + limit]
    else:
        column = getattr(totals, sort).get(metric)
        if column is not None:  # heaviest first, ties by frame id (lexsort: last key first)
            ids = ids[np.lexsort((ids, -np.asarray(column, dtype=np.int64)[ids]))]
        page = ids[offset : offset + limit].tolist()
    rows = [_frame_row(index, f, totals, nodes=totals.nodes[f], kids=1) for f in page]
    return {"rows": rows, "count": len(ids), "total": total(index, metric)}


def bottom_up(
    index: Index,
    path: list[int],
    metric: str,
    mode: str = "excl",
    sort: str = "incl",
    kinds: Iterable[str] = (),
    limit: int = 200,
) -> dict:
    """Callers of the frame ``path[0]`` reached through ``path[1:]``.

    With an empty path, the top level: every frame with its own cost (``excl``
    mode) or its cost with callees (``incl``), heaviest first unless sorted by
    name, like `dc_core.model.views.bottom_up`.
    """
    if not path:
        return flat(index, metric, "name" if sort == "name" else mode, kinds, limit)
    by_frame = index.memo(
        ("by_frame",), lambda: Children(index.frame_array(), len(index.tree.frames))
    )
    rows = [
        {
            "id": row.frame,
            **frame_fields(index, row.frame),
            "excl": row.values,
            "incl": row.values,
            "kids": int(row.more),
            "nodes": row.nodes,
        }
        for row in views.callers(
            index.tree, path, mode, _nested(index), lambda f: [n for n in by_frame(f) if n]
        )
    ]
    if sort == "name":
        rows.sort(key=lambda r: (r["label"].lower(), r["id"]))
    else:
        rows.sort(key=lambda r: (-r["incl"].get(metric, 0), r["id"]))
    return {
        "rows": rows[:limit],
        "count": len(rows),
        "total": total(index, metric),
        "window": format_window(index.ref.window),
    }
