"""The "Windows" view: one call path's cost in each window of one rank.

The rank's windows are merged into one tree (`dc_core.ensemble.merge`, a
column per window, in step order); the path is found there by frames, so a
node picked in any window's tree, or in the cross-rank tree, has its series.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ensemble import Ensemble
from ..model.tree import Frame
from ..model.window import steps_text
from .params import format_window
from .spread import follow


def windows_series(e: Ensemble, frames: Sequence[Frame], metric: str) -> dict:
    """Per window (column of ``e``, in step order): the inclusive ``metric``
    of the node on the call path ``frames``, the window's total and the
    node's share of it (None for an empty window). ``found`` is False when no
    window has the whole path (the values are then zeros)."""
    path = follow(frames, e.children, e.node_frame)
    found = len(path) == len(frames)
    node = path[-1] if path else 0
    values = e.values(metric, node).tolist() if found else [0] * len(e.columns)
    totals = e.values(metric, 0).tolist()
    order = sorted(range(len(e.columns)), key=lambda c: (e.columns[c].steps, c))
    rows = []
    for c in order:
        column = e.columns[c]
        rows.append(
            {
                "window": format_window(column.steps),
                "label": steps_text(column.steps),
                "steps": list(column.steps),
                "value": values[c],
                "total": totals[c],
                "share": values[c] / totals[c] if totals[c] else None,
            }
        )
    return {"metric": metric, "found": found, "path": [f.label() for f in frames], "windows": rows}
