"""Tree tables, served a level at a time: top-down children, the hot path,
flat (by frame) and bottom-up (callers of a frame).

A 100k-node profile is never sent whole: each function returns the rows one
expansion needs, sorted by the selected metric and capped at ``limit``.
"""

from __future__ import annotations

from typing import Iterable

from ..model import views
from ..model.report import window_label
from .params import format_window
from .store import Index

SORTS = ("incl", "excl", "name")


def frame_fields(index: Index, fid: int) -> dict:
    frame = index.tree.frames[fid]
    return {
        "kind": frame.kind, "name": frame.name, "file": frame.file, "line": frame.line,
        "detail": frame.detail, "backward": frame.backward, "label": index.labels()[fid],
    }


def node_row(index: Index, node: int) -> dict:
    """One node as the tables show it: identity, all metrics, child count."""
    row = {"id": node, **frame_fields(index, index.tree.frame[node])}
    if node == 0:
        p = index.profile
        row["label"] = window_label(index.ref.window, p.step_times_ns, p.env)
    row["excl"] = {m: index.excl(m)[node] for m in index.metrics}
    row["incl"] = {m: index.incl(m)[node] for m in index.metrics}
    row["kids"] = len(index.children(node))
    return row


def _sort_key(index: Index, metric: str, sort: str):
    if sort == "name":
        labels, frame = index.labels(), index.tree.frame
        return lambda n: (labels[frame[n]].lower(), n)
    column = index.incl(metric) if sort == "incl" else index.excl(metric)
    return lambda n: (-column[n], n)


def children(index: Index, nodes: Iterable[int], metric: str, sort: str = "incl", limit: int = 200) -> dict:
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
    return index.incl(metric)[0]


def hot_path(index: Index, start: int, metric: str, threshold: float = 0.05, sort: str = "incl",
             limit: int = 200) -> dict:
    """Follow the heaviest child from ``start`` while it holds at least
    ``threshold`` of the window total; returns the chain and the children of
    every node to expand along it (so the table opens in one round trip)."""
    incl = index.incl(metric)
    floor = threshold * incl[0]
    chain = [start]
    node = start
    while len(chain) < 256:
        kids = index.children(node)
        if not kids:
            break
        heavy = max(kids, key=lambda k: (incl[k], -k))
        if incl[heavy] <= 0 or incl[heavy] < floor:
            break
        chain.append(heavy)
        node = heavy
    expand = chain[:-1] if len(chain) > 1 else chain
    result = children(index, expand, metric, sort, limit)
    result.update(chain=chain, root=node_row(index, start))
    return result


def _nested(index: Index) -> list[bool]:
    return index.memo(("nested",), lambda: views.nested(index.tree, index.children))


def _flat_totals(index: Index) -> views.FlatTotals:
    return index.memo(("flat",), lambda: views.flat_totals(index.tree, _nested(index)))


def _frame_row(index: Index, fid: int, totals: views.FlatTotals, **extra) -> dict:
    return {"id": fid, **frame_fields(index, fid), "excl": {m: c[fid] for m, c in totals.excl.items()},
            "incl": {m: c[fid] for m, c in totals.incl.items()}, **extra}


def flat(index: Index, metric: str, sort: str = "excl", kinds: Iterable[str] = (), limit: int = 200,
         offset: int = 0) -> dict:
    """Frames with their totals over the whole window, heaviest first."""
    totals = _flat_totals(index)
    wanted = set(kinds)
    frames = index.tree.frames
    ids = [f for f in totals.frame_ids() if not wanted or frames[f].kind in wanted]
    if sort == "name":
        labels = index.labels()
        ids.sort(key=lambda f: (labels[f].lower(), f))
    else:
        column = getattr(totals, sort).get(metric) or [0] * len(frames)
        ids.sort(key=lambda f: (-column[f], f))
    rows = [_frame_row(index, f, totals, nodes=totals.nodes[f], kids=1)
            for f in ids[offset:offset + limit]]
    return {"rows": rows, "count": len(ids), "total": total(index, metric)}


def bottom_up(index: Index, path: list[int], metric: str, mode: str = "excl", sort: str = "incl",
              kinds: Iterable[str] = (), limit: int = 200) -> dict:
    """Callers of the frame ``path[0]`` reached through ``path[1:]``.

    With an empty path, the top level: every frame with its own cost (``excl``
    mode) or its cost with callees (``incl``), heaviest first unless sorted by
    name, like `dc_core.model.views.bottom_up`.
    """
    if not path:
        return flat(index, metric, "name" if sort == "name" else mode, kinds, limit)
    by_frame = index.memo(("by_frame",), lambda: _by_frame(index))
    rows = [{"id": row.frame, **frame_fields(index, row.frame), "excl": row.values, "incl": row.values,
             "kids": int(row.more), "nodes": row.nodes}
            for row in views.callers(index.tree, path, mode, _nested(index), lambda f: by_frame.get(f, []))]
    if sort == "name":
        rows.sort(key=lambda r: (r["label"].lower(), r["id"]))
    else:
        rows.sort(key=lambda r: (-r["incl"].get(metric, 0), r["id"]))
    return {"rows": rows[:limit], "count": len(rows), "total": total(index, metric),
            "window": format_window(index.ref.window)}


def _by_frame(index: Index) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for node, fid in enumerate(index.tree.frame):
        if node:
            out.setdefault(fid, []).append(node)
    return out
