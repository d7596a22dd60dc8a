"""A node's cost along a run: its value per window, and the nodes whose share
of the window trends up.

The input is an `Ensemble` of the windows of one rank (one column per
window). A window's value is normalised per step, since windows may hold
different step counts; its share is the node's inclusive value over the
root's, which cancels a host that is uniformly slower in some windows.

A rise is judged with the Mann–Kendall test (two-sided, tie-corrected normal
approximation with continuity correction) and sized with the Theil–Sen slope
over the windows since it started (`first_rise`): both are rank statistics,
so one noisy window moves neither, unlike "every window above the last" (one
dip hides a regression) or a least-squares fit (one outlier makes one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..model.kinds import at_peak

#: An ancestor is reported beside a rising descendant only if the descendants
#: already reported explain less than this fraction of its own rise.
EXPLAINED = 0.5


@dataclass(frozen=True)
class Point:
    """One window of a node's series."""

    steps: tuple[int, int]  # (start, end_exclusive)
    value: float  # the node's inclusive metric per step of the window
    share: float  # the node's inclusive metric over the window's (root's); 0 for an empty window


@dataclass(frozen=True)
class Trend:
    """A node's share of the window across windows, with its trend statistics."""

    node: int
    s: int  # Mann–Kendall S
    z: float
    p: float  # two-sided
    slope: float  # Theil–Sen slope of the share per step, over the windows from the rise's start on
    rise: float  # slope × the steps those windows span: the share the rise gained
    first_rise: (
        int  # index (in step order) of the first window above the baseline (`first_rise`); 0: none
    )
    windows: tuple[tuple[int, int], ...]
    shares: tuple[float, ...]

    def rises(self, alpha: float) -> bool:
        """Whether the share rises: S > 0 at p < ``alpha`` and a positive slope."""
        return self.s > 0 and self.p < alpha and self.slope > 0


def mann_kendall(values: Sequence[float]) -> tuple[int, float, float]:
    """Mann–Kendall trend test of a series in time order.

    Returns:
        ``(S, z, p)``: S = Σ_{i<j} sign(x_j − x_i); z its normal score with
        the tie-corrected variance and a continuity correction; p two-sided.
        A constant series (variance 0) gives ``(0, 0.0, 1.0)``.
    """
    s, var = _s_and_var(np.asarray(values, dtype=np.float64)[None, :])
    z, p = _z_and_p(s, var)
    return int(s[0]), float(z[0]), float(p[0])


def _s_and_var(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S and Var(S) of every row of ``x`` (rows: series, columns: time)."""
    rows, n = x.shape
    s = np.zeros(rows, np.int64)
    # One lag at a time: rows × (n − k) comparisons each, never the
    # rows × n × n cube of all pairs at once (500 windows: 250,000 pairs a row).
    for k in range(1, n):
        s += np.sign(x[:, k:] - x[:, :-k]).astype(np.int64).sum(axis=1)
    # Ties: Σ t(t−1)(2t+5) over each row's groups of equal values, from the
    # lengths of runs in the sorted row (a new run starts each row too).
    ordered = np.sort(x, axis=1)
    starts = np.ones_like(ordered, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.flatnonzero(starts.ravel())
    length = np.diff(np.append(first, rows * n)).astype(np.float64)
    ties = np.bincount(first // n, weights=length * (length - 1) * (2 * length + 5), minlength=rows)
    var = (n * (n - 1) * (2 * n + 5) - ties) / 18.0
    return s, var


def _z_and_p(s: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, (s - np.sign(s)) / np.where(sd > 0, sd, 1.0), 0.0)
    p = np.array([math.erfc(abs(v) / math.sqrt(2.0)) for v in z])
    return z, p


def theil_sen(x: Sequence[float], y: Sequence[float]) -> float:
    """Median of the slopes between every pair of points with distinct x (0 if none)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    keep = dx != 0
    return float(np.median((y[j] - y[i])[keep] / dx[keep])) if keep.any() else 0.0


#: A window is clearly above the baseline this many robust standard deviations
#: (1.4826 × MAD) above the baseline's median.
CLEAR_SIGMAS = 3.0
#: Fewer baseline windows than this give no robust spread: a rise is not walked back over them.
MIN_BASELINE = 8


def first_rise(y: Sequence[float], x: Sequence[float] | None = None) -> int:
    """Index of the first window clearly above the baseline, in a series in
    time order (``x``: the windows' steps; by default their index).

    Every split ``k`` is fitted by least squares with a flat baseline over
    windows ``0..k`` and a free line over the rest (at least two windows), the
    rest's mean above the baseline's. A free line fits a ramp and a jump (a
    new code path) alike, which a continuous hinge does not. Compounding
    growth is no line, though: its last windows outweigh its first, and the
    best split comes late. So the rise is walked back from the split while
    the window before it is clearly above the windows before that
    (`CLEAR_SIGMAS`, over `MIN_BASELINE` windows or more).
    A series rising from the start gives 1 (window 0 is its own baseline).
    Returns 0 when no split rises.
    """
    y = np.asarray(y, np.float64)
    n = len(y)
    if n < 3:
        return 0
    x = np.arange(n, dtype=np.float64) if x is None else np.asarray(x, np.float64)
    if x[-1] != x[0]:
        x = (x - x.mean()) / (x[-1] - x[0])  # keep the sums of squares below from cancelling
    head = np.arange(1, n - 1)  # windows in the baseline: 1..n−2, leaving the line two or more
    sy, syy = np.cumsum(y)[: n - 2], np.cumsum(y * y)[: n - 2]
    pre_mean = sy / head
    pre_sse = syy - sy * pre_mean

    def tail(v: np.ndarray) -> np.ndarray:  # sum over windows k+1.. for each split k
        return np.cumsum(v[::-1])[::-1][1 : n - 1]

    m = (n - head).astype(np.float64)
    tx, ty, txx, txy, tyy = tail(x), tail(y), tail(x * x), tail(x * y), tail(y * y)
    vxx, vxy, vyy = txx - tx * tx / m, txy - tx * ty / m, tyy - ty * ty / m
    with np.errstate(divide="ignore", invalid="ignore"):
        post_sse = vyy - np.where(vxx > 0, vxy * vxy / np.where(vxx > 0, vxx, 1.0), 0.0)
    sse = np.where(ty / m > pre_mean, pre_sse + post_sse, np.inf)
    if not np.isfinite(sse).any():
        return 0
    # A ramp's line also passes through the last flat window, so splitting
    # before or after that window fits alike (to within its noise): take the
    # latest split within two residual variances of the best.
    best = sse.min()
    tolerance = 2 * best / max(n - 4, 1) + 1e-12 * float((y * y).sum())
    first = int(np.flatnonzero(sse <= best + tolerance)[-1]) + 1
    while first - 1 >= MIN_BASELINE and _clearly_above(y[first - 1], y[: first - 1]):
        first -= 1
    return first


def _clearly_above(value: float, base: np.ndarray) -> bool:
    level = np.median(base)
    return value > level + CLEAR_SIGMAS * 1.4826 * np.median(np.abs(base - level))


def window_order(ensemble) -> list[int]:
    """Columns in step order.

    Raises:
        ValueError: two columns hold the same steps: the ensemble is not the
            windows of one rank (a trend across ranks means nothing).
    """
    order = sorted(range(len(ensemble.columns)), key=lambda c: ensemble.columns[c].steps)
    steps = [ensemble.columns[c].steps for c in order]
    if any(a == b for a, b in zip(steps, steps[1:])):
        raise ValueError(
            "a trend needs the windows of one rank: several profiles hold the same steps"
        )
    return order


def _shares(ensemble, metric: str, order: list[int], nodes: np.ndarray | slice) -> np.ndarray:
    """(nodes, windows) shares of the window, 0 where the window is empty or
    the metric was not recorded."""
    m = ensemble.incl.get(metric)
    if m is None:
        m = np.zeros((len(ensemble), len(ensemble.columns)), np.int64)
    m = np.asarray(m)[:, order]
    root = m[0].astype(np.float64)
    return m[nodes].astype(np.float64) / np.where(root > 0, root, np.inf)


def series(ensemble, node: int, metric: str) -> list[Point]:
    """The node's value per step and share in each window, in step order
    (a metric at the memory peak as it is). A window without the node counts
    0 (its column holds 0)."""
    order = window_order(ensemble)
    whole = at_peak(metric)
    values = ensemble.values(metric, node)
    shares = _shares(ensemble, metric, order, np.array([node]))[0]
    out = []
    for share, c in zip(shares, order):
        column = ensemble.columns[c]
        out.append(
            Point(
                tuple(column.steps),
                float(values[c]) / (1 if whole else column.step_count),
                float(share),
            )
        )
    return out


def trends(
    ensemble,
    metric: str,
    min_share: float = 0.02,
    alpha: float = 0.01,
    min_rise: float = 0.0,
    min_windows: int = 8,
) -> list[Trend]:
    """Nodes whose share of the window rises across the windows, largest rise first.

    A node is tested when its share reaches ``min_share`` in some window,
    all such nodes at once; it rises when Mann–Kendall gives S > 0 with
    p < ``alpha`` and its rise (the Theil–Sen slope over the windows from
    the rise's start on, times the steps they span; see `_trend`) is
    positive and at least ``min_rise``. With 500 windows the test sees
    drifts of a tenth of a percent; ``min_rise`` keeps those out.

    A rise shows in every ancestor too. Nodes are decided deepest first
    (``parent[i] < i``, so in reverse index order) and an ancestor is
    reported only if the rises already reported below it explain less than
    `EXPLAINED` of its own: the deepest node that explains a rise names
    it, and an ancestor that also rises for reasons of its own still shows.

    Args:
        ensemble: The windows of one rank, one column each.
        metric: The metric shares are taken in (see `outliers.time_metric`).
        min_share: Share a node must reach in some window to be tested.
        alpha: Significance level of the two-sided test.
        min_rise: Least share the rise gained to report.
        min_windows: Fewer windows than this give no trends.

    Raises:
        ValueError: two columns hold the same steps (see `window_order`).
    """
    order = window_order(ensemble)
    steps = [tuple(ensemble.columns[c].steps) for c in order]
    if len(order) < max(min_windows, 3) or metric not in ensemble.incl:
        return []
    shares = _shares(ensemble, metric, order, slice(None))
    tested = np.flatnonzero(shares.max(axis=1) >= min_share)
    tested = tested[tested > 0]  # the root's share is 1 in every non-empty window
    if not len(tested):
        return []
    s, var = _s_and_var(shares[tested])
    z, p = _z_and_p(s, var)
    x = np.array([a for a, _ in steps], np.float64)
    rising: dict[int, Trend] = {}
    for k in np.flatnonzero((s > 0) & (p < alpha)):
        node = int(tested[k])
        trend = _trend(node, int(s[k]), float(z[k]), float(p[k]), x, steps, shares[node])
        if trend.slope > 0 and trend.rise >= min_rise:
            rising[node] = trend
    return sorted(_deepest(ensemble.parent, rising), key=lambda t: (-t.rise, t.p, t.node))


def trend_of(ensemble, node: int, metric: str) -> Trend:
    """One node's `Trend`, whether or not it rises (see `Trend.rises`)."""
    order = window_order(ensemble)
    steps = [tuple(ensemble.columns[c].steps) for c in order]
    shares = _shares(ensemble, metric, order, np.array([node]))[0]
    s, z, p = mann_kendall(shares)
    return _trend(node, s, z, p, np.array([a for a, _ in steps], np.float64), steps, shares)


def _trend(
    node: int, s: int, z: float, p: float, x: np.ndarray, steps: list, shares: np.ndarray
) -> Trend:
    """Size the rise over the windows from its start on (the last baseline
    window and after): a regression in the last fifth of a run would
    otherwise get the flat majority's slope, about 0, from Theil–Sen."""
    first = first_rise(shares, x) if s > 0 else 0
    since = max(first - 1, 0)
    slope = theil_sen(x[since:], shares[since:])
    rise = float(slope * (x[-1] - x[since])) if len(x) else 0.0
    return Trend(node, s, z, p, slope, rise, first, tuple(steps), tuple(float(v) for v in shares))


def _deepest(parent: Sequence[int], rising: dict[int, Trend]) -> list[Trend]:
    """The rising nodes not explained by rising nodes below them (see `trends`)."""
    below = dict.fromkeys(rising, 0.0)  # rise explained by reported nodes under each rising node
    out = []
    for node in sorted(rising, reverse=True):
        trend = rising[node]
        reported = below[node] < EXPLAINED * trend.rise
        if reported:
            out.append(trend)
        # Hand what this subtree explains to the nearest rising ancestor only,
        # so nothing is counted twice on the way up.
        up = parent[node]
        while up > 0 and up not in rising:
            up = parent[up]
        if up > 0:
            below[up] += trend.rise if reported else below[node]
    return out
