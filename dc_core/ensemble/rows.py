"""Rows and JSON of a cross-rank tree and its outlier ranks (pure data, for
the CLI and anyone reading ``deepcontext report --json``'s ``"merged"``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.tree import Frame, frame_json
from .merge import Ensemble
from .outliers import Outlier, outliers, time_metric

#: Windows with more ranks than this lead with the cross-rank tree.
CROSS_RANK_FROM = 9


@dataclass
class MergedRow:
    """One printed line of a cross-rank tree: the node's inclusive ``metric``
    across ranks (absent = 0) and its share of the mean rank's window."""

    depth: int
    node: int
    frame: Frame
    mean: float
    max: int
    max_rank: int
    imbalance: float
    percent: float


def merged_rows(
    ensemble: Ensemble,
    metric: str,
    depth: int | None = None,
    min_fraction: float = 0.0,
    limit: int = 200,
) -> list[MergedRow]:
    """Rows of the merged tree, heaviest (by mean) first, at most ``limit``."""
    s = ensemble.stats(metric)
    mean = s.mean
    total = float(mean[0]) or 1.0
    rows: list[MergedRow] = []
    stack = [(k, 0) for k in sorted(ensemble.children(0), key=lambda k: mean[k])]
    while stack and len(rows) < limit:
        node, level = stack.pop()
        if mean[node] < total * min_fraction or s.max[node] == 0:
            continue
        rows.append(
            MergedRow(
                level,
                node,
                ensemble.node_frame(node),
                float(mean[node]),
                int(s.max[node]),
                ensemble.columns[int(s.argmax[node])].rank,
                float(s.imbalance[node]),
                100.0 * float(mean[node]) / total,
            )
        )
        if depth is None or level + 1 < depth:
            stack.extend(
                (k, level + 1) for k in sorted(ensemble.children(node), key=lambda k: mean[k])
            )
    return rows


def merged_json(
    ensemble: Ensemble,
    metric: str | None = None,
    depth: int | None = None,
    min_fraction: float = 0.0,
    found: list[Outlier] | None = None,
) -> dict[str, Any]:
    """A window's cross-rank tree: per node and metric ``sum``, ``mean``,
    ``min``, ``max``, ``max_rank`` and ``imbalance`` of the inclusive value
    over ranks (absent = 0), plus the outlier ranks. Nested like the
    ``"profiles"`` trees; serialise with `dc_core.export.nested.dumps`."""
    metric = metric or time_metric(ensemble)
    stats = {m: ensemble.stats(m) for m in ensemble.incl}
    ranks = [c.rank for c in ensemble.columns]
    key = stats[metric].mean if metric in stats else None
    limit = (float(key[0]) * min_fraction) if key is not None else 0.0
    top: list[dict[str, Any]] = []
    stack = [(0, 0, top)]
    while stack:
        n, level, siblings = stack.pop()
        kids = (
            []
            if depth is not None and level >= depth
            else [k for k in ensemble.children(n) if key is None or key[k] >= limit]
        )
        if key is not None:
            kids.sort(key=lambda k: -key[k])
        item = {
            "id": n,
            **frame_json(ensemble.node_frame(n)),
            "stats": {
                m: {
                    "sum": int(s.sum[n]),
                    "mean": float(s.mean[n]),
                    "min": int(s.min[n]),
                    "max": int(s.max[n]),
                    "max_rank": ranks[int(s.argmax[n])],
                    "imbalance": round(float(s.imbalance[n]), 6),
                }
                for m, s in stats.items()
            },
            "children": [],
        }
        siblings.append(item)
        stack.extend((k, level + 1, item["children"]) for k in reversed(kids))
    first = ensemble.columns[0] if ensemble.columns else None
    found = outliers(ensemble, metric) if found is None else found
    return {
        "run": first.run if first else "",
        "steps": list(first.steps) if first else [],
        "ranks": ranks,
        "metric": metric,
        "tree": top[0],
        "outliers": [outlier_json(ensemble, o) for o in found],
    }


def outlier_json(ensemble: Ensemble, o: Outlier) -> dict[str, Any]:
    """One outlier rank: the measure it stands out in, per step, and the nodes
    (their ids in ``"merged"`` and their paths) that explain its excess."""
    return {
        "rank": o.rank,
        "host": o.host,
        "measure": o.measure,
        "value_ns": round(o.value),
        "median_ns": round(o.median),
        "ratio": round(o.ratio, 4),
        "z": None if o.z is None else round(o.z, 2),
        "wait_ns": round(o.wait),
        "node": {
            "id": o.node,
            "path": [ensemble.node_frame(n).label() for n in ensemble.path(o.node)],
        },
        "explain": [
            {
                "id": k,
                "path": [ensemble.node_frame(n).label() for n in ensemble.path(k)],
                "excess_ns": round(v),
            }
            for k, v in o.explain
        ],
    }
