"""``deepcontext report --trend PATH|ID|top``: a node's cost per window along
a run (the context-tree analogue of a scalar curve), or the nodes whose share
of the window rises the most.

Pure helpers over an `Ensemble` of one rank's windows: `trend_rows` returns
plain data, `print_trend` lays it out with rich and `trend_json` makes it a
JSON-able value; the report command only parses its options and calls them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..analyzer.trends import p_text
from ..ensemble import PATH_SEP
from ..ensemble.outliers import time_metric
from ..ensemble.series import Point, Trend, series, trend_of, trends
from ..model.kinds import at_peak
from ..model.rules import DEFAULTS
from ..model.window import steps_text
from .common import middle_truncate
from .present import format_value

TOP = "top"
#: Windows listed in the table; past this, evenly spaced ones (the first and last among them).
MAX_TABLE_ROWS = 24
SPARKS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
SPARK_WIDTH = 60


@dataclass(frozen=True)
class NodeTrend:
    """One node's series and its trend over the shares."""

    path: list[str]  # labels from the root's child down
    points: list[Point]
    trend: Trend
    # where a significant rise starts; None when the share does not rise
    first_rise_step: int | None

    @property
    def node(self) -> int:
        return self.trend.node


def trend_rows(ensemble, spec: str, metric: str | None = None, top: int = 5) -> list[NodeTrend]:
    """The trend of the node ``spec`` names, or of the ``top`` rising nodes.

    Args:
        ensemble: The windows of one rank (one column per window).
        spec: ``"top"``; a node id; or a path of labels joined by ``" › "`` as
            the report prints it (``" > "`` is accepted too).
        metric: Metric to follow; `time_metric` when None.
        top: How many rising nodes ``"top"`` lists (the analyzer's
            ``share_trend`` thresholds decide which rise).

    Raises:
        ValueError: the metric is not in the profiles, or ``spec`` names no
            node (the message names the spec and lists close matches).
    """
    metric = metric or time_metric(ensemble)
    if metric not in ensemble.incl:
        raise ValueError(
            f"metric {metric!r} is not in these profiles; they have: {', '.join(ensemble.incl)}"
        )
    if spec.strip() == TOP:
        found = trends(
            ensemble,
            metric,
            DEFAULTS["share_trend.min_share"],
            DEFAULTS["share_trend.alpha"],
            DEFAULTS["share_trend.min_rise"],
            int(DEFAULTS["share_trend.min_windows"]),
        )
        return [_row(ensemble, t.node, metric) for t in found[:top]]
    return [_row(ensemble, resolve(ensemble, spec), metric)]


def resolve(ensemble, spec: str) -> int:
    """The node a spec names (see `trend_rows`). Raises ValueError naming it."""
    text = spec.strip()
    if text.isascii() and text.isdigit():
        if not 0 < int(text) < len(ensemble):
            raise ValueError(
                f"--trend {spec!r}: no node {text} (the merged tree has nodes 1..{len(ensemble) - 1})"
            )
        return int(text)
    node = ensemble.find(text)
    if node is None and " > " in text:
        node = ensemble.find(text.replace(" > ", PATH_SEP))
    if not node:
        close = close_matches(ensemble, text)
        hint = "; close matches:\n  " + "\n  ".join(close) if close else ""
        raise ValueError(
            f"--trend {spec!r}: no such path in the merged tree (labels joined by {PATH_SEP.strip()!r}, "
            f"as the report prints them){hint}"
        )
    return node


def close_matches(ensemble, spec: str, limit: int = 5) -> list[str]:
    """Full paths of nodes whose own label is close to the spec's last label,
    most like the whole spec first."""
    last = spec.replace(" > ", PATH_SEP).split(PATH_SEP.strip())[-1].strip()
    labels: dict[str, list[int]] = {}
    for node in range(1, len(ensemble)):
        labels.setdefault(ensemble.node_frame(node).label(), []).append(node)
    near = difflib.get_close_matches(last, labels, n=limit, cutoff=0.75)
    paths = [ensemble.label(node) for label in near for node in labels[label]]
    return sorted(paths, key=lambda p: -difflib.SequenceMatcher(None, spec, p).ratio())[:limit]


def _row(ensemble, node: int, metric: str) -> NodeTrend:
    trend = trend_of(ensemble, node, metric)
    rising = trend.rises(DEFAULTS["share_trend.alpha"]) and trend.first_rise > 0
    path = [ensemble.node_frame(n).label() for n in ensemble.path(node)]
    return NodeTrend(
        path,
        series(ensemble, node, metric),
        trend,
        trend.windows[trend.first_rise][0] if rising else None,
    )


def trend_json(
    ensemble, spec: str, metric: str | None = None, top: int = 5
) -> dict[str, Any] | list[dict[str, Any]]:
    """`trend_rows` as JSON: one object for a node, a list of them for ``"top"``."""
    metric = metric or time_metric(ensemble)
    rows = [_json(row, metric) for row in trend_rows(ensemble, spec, metric, top)]
    return rows if spec.strip() == TOP else rows[0]


def _json(row: NodeTrend, metric: str) -> dict[str, Any]:
    return {
        "metric": metric,
        "node": {"id": row.node, "path": row.path},
        "points": [
            {"steps": list(p.steps), "value": p.value, "share": p.share} for p in row.points
        ],
        "mann_kendall": {"S": row.trend.s, "z": row.trend.z, "p": row.trend.p},
        "theil_sen_slope": row.trend.slope,
        "rise": row.trend.rise,
        "first_rise_step": row.first_rise_step,
    }


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """Values as block characters, lowest to highest; averaged into ``width``
    buckets when there are more."""
    if not values:
        return ""
    v = np.asarray(values, np.float64)
    if len(v) > width:
        v = np.array([chunk.mean() for chunk in np.array_split(v, width)])
    low, high = v.min(), v.max()
    if high <= low:
        return SPARKS[0] * len(v)
    levels = np.minimum(((v - low) / (high - low) * len(SPARKS)).astype(int), len(SPARKS) - 1)
    return "".join(SPARKS[i] for i in levels)


def shown_windows(count: int, limit: int = MAX_TABLE_ROWS) -> list[int]:
    """Indices of the windows the table lists: all, or ``limit`` evenly spaced
    ones from the first to the last."""
    if count <= limit:
        return list(range(count))
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})


def print_trend(
    console: Console, ensemble, spec: str, metric: str | None = None, top: int = 5
) -> None:
    """The trend of ``spec`` (see `trend_rows`): per node its path, the
    statistics, a sparkline of its share and a table of its windows."""
    metric = metric or time_metric(ensemble)
    rows = trend_rows(ensemble, spec, metric, top)
    if not rows:
        need = int(DEFAULTS["share_trend.min_windows"])
        console.print(
            f"no node's share of the window rises across these {len(ensemble.columns)} windows "
            f"({metric}; the test needs {need} windows or more)"
        )
        return
    for row in rows:
        _print_row(console, row, metric)


def _print_row(console: Console, row: NodeTrend, metric: str) -> None:
    per = "at the peak" if at_peak(metric) else "per step"  # a peak is one moment, not per step
    console.rule(
        Text(f"trend of node {row.node} ({metric} {per}, share of the window)", style="bold")
    )
    console.print(
        Text(middle_truncate(PATH_SEP.join(row.path), max(console.width - 2, 24)), style="green"),
        soft_wrap=True,
    )
    t = row.trend
    per_1000 = f"{100 * t.slope * 1000:+.3g} percentage points of the window per 1,000 steps"
    verdict = (
        f"rising from step {row.first_rise_step}: {100 * t.rise:+.1f} points since (Theil\u2013Sen, {per_1000})"
        if row.first_rise_step is not None
        else f"no significant rise (Theil\u2013Sen {per_1000})"
    )
    console.print(f"Mann\u2013Kendall S = {t.s}, p = {p_text(t.p)}; {verdict}")
    shares = [p.share for p in row.points]
    if shares:
        line = Text("share ")
        line.append(sparkline(shares, min(SPARK_WIDTH, max(console.width - 30, 8))), style="cyan")
        # the line spans the share's own range, which may be narrow: say it
        line.append(
            f"  {100 * shares[0]:.1f}% \u2192 {100 * shares[-1]:.1f}% "
            f"(low {100 * min(shares):.1f}%, high {100 * max(shares):.1f}%)"
        )
        console.print(line)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for head in ("window", per, "share"):
        table.add_column(head, justify="right", no_wrap=True)
    shown = shown_windows(len(row.points))
    for i in shown:
        point = row.points[i]
        table.add_row(
            escape(steps_text(point.steps)),
            format_value(point.value, metric),
            f"{100 * point.share:.2f}%",
        )
    console.print(table)
    if len(shown) < len(row.points):
        console.print(
            Text(
                f"{len(shown)} of {len(row.points)} windows shown, evenly spaced (--json lists them all)",
                style="dim",
            )
        )
