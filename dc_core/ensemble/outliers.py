"""Outlier ranks of a window, and the nodes that explain them.

Per rank (a column of a cross-rank `Ensemble`) and per step: the step time,
the compute time (the window's time less the time under collectives) and
each top-level phase's compute time. In synchronous training every rank's
step lasts as long as the slowest rank's, because the others wait in their
collectives; so a slow rank shows in compute, and the ranks that wait for it
show in wait, not in compute: they are not called slow.

A rank is an outlier in a measure when, with `ROBUST_FROM` ranks or more,
its robust z-score (distance from the ranks' median in units of the median
absolute deviation, scaled to a normal's sigma) passes ``z`` and it exceeds
the median by at least ``min_excess``; with fewer ranks, when it is ``ratio``
times the median (a median of three says little about spread).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.opnames import is_collective
from .merge import Ensemble

#: Ranks from which spread is estimated (median absolute deviation).
ROBUST_FROM = 8
#: MAD × this estimates a normal distribution's sigma.
MAD_SIGMA = 1.4826


@dataclass
class RankTimes:
    """One rank's times per step, in the metric's unit (ns)."""

    column: int
    rank: int
    host: str
    step: float
    compute: float
    wait: float
    phases: dict[str, float] = field(default_factory=dict)  # phase → compute per step


@dataclass
class Outlier:
    """A rank standing out in ``measure`` (``step``, ``compute`` or ``phase <name>``)."""

    rank: int
    host: str
    column: int
    measure: str
    value: float
    median: float
    z: float | None  # robust z-score; None with fewer than `ROBUST_FROM` ranks
    wait: float  # the rank's collective time per step
    node: int  # the deepest node holding most of the excess (0: none found)
    explain: list[tuple[int, float]] = field(default_factory=list)  # node's children: (child, excess per step)

    @property
    def ratio(self) -> float:
        return self.value / self.median if self.median else float("inf")

    @property
    def excess(self) -> float:
        return self.value - self.median


def collective_mask(ensemble: Ensemble) -> tuple[np.ndarray, np.ndarray]:
    """(outermost collective nodes, nodes at or under a collective)."""
    n = len(ensemble)
    coll = np.array([is_collective(f.kind, f.name) for f in (ensemble.node_frame(i) for i in range(n))], bool)
    under = coll.copy()
    for i in range(1, n):
        if under[ensemble.parent[i]]:
            under[i] = True
    outer = coll.copy()
    outer[1:] &= ~under[np.asarray(ensemble.parent[1:])]
    return outer, under


def time_metric(ensemble: Ensemble) -> str:
    """Device time where the ranks ran device work, else CPU time."""
    device = ensemble.incl.get("device_time_ns")
    return "device_time_ns" if device is not None and np.asarray(device[0]).any() else "cpu_time_ns"


def rank_times(ensemble: Ensemble, metric: str | None = None) -> list[RankTimes]:
    """Step, compute, wait and per-phase compute per step, per rank."""
    metric = metric or time_metric(ensemble)
    m = np.asarray(ensemble.incl.get(metric, np.zeros((len(ensemble), len(ensemble.columns)), np.int64)))
    outer, _ = collective_mask(ensemble)
    top = _top_ancestor(ensemble)
    steps = np.array([c.step_count for c in ensemble.columns], float)
    wait = m[outer].sum(axis=0) / steps
    out = []
    phases = [k for k in ensemble.children(0) if ensemble.node_frame(k).kind == "phase"]
    phase_wait = {p: m[outer & (top == p)].sum(axis=0) / steps for p in phases}
    for j, col in enumerate(ensemble.columns):
        step = float(np.median(col.step_times_ns)) if col.step_times_ns else m[0, j] / steps[j]
        out.append(RankTimes(
            j, col.rank, col.host, step, m[0, j] / steps[j] - wait[j], float(wait[j]),
            {ensemble.node_frame(p).name: m[p, j] / steps[j] - phase_wait[p][j] for p in phases}))
    return out


def _top_ancestor(ensemble: Ensemble) -> np.ndarray:
    """Per node, its ancestor among the root's children (0 for the root)."""
    top = np.zeros(len(ensemble), np.int64)
    for i in range(1, len(ensemble)):
        p = ensemble.parent[i]
        top[i] = i if p == 0 else top[p]
    return top


def outliers(ensemble: Ensemble, metric: str | None = None, z: float = 3.5, min_excess: float = 0.03,
             ratio: float = 1.2, explain: int = 5) -> list[Outlier]:
    """The outlier ranks of a cross-rank ensemble, most outlying first (one
    entry per rank: its most outlying measure); see the module docstring."""
    metric = metric or time_metric(ensemble)
    times = rank_times(ensemble, metric)
    if len(times) < 2:
        return []
    measures = {"compute": [t.compute for t in times], "step": [t.step for t in times]}
    for name in times[0].phases:
        measures[f"phase {name}"] = [t.phases[name] for t in times]
    best: dict[int, tuple[float, str, float, float, float | None]] = {}
    for measure, values in measures.items():
        x = np.asarray(values, float)
        med = float(np.median(x))
        if med <= 0:
            continue
        scores = _robust_z(x, med) if len(x) >= ROBUST_FROM else None
        for j in range(len(x)):
            if scores is not None:
                hit = scores[j] >= z and x[j] >= med * (1 + min_excess)
                score = float(scores[j])
            else:
                hit, score = x[j] >= ratio * med, x[j] / med
            if hit and (j not in best or score > best[j][0]):
                best[j] = (score, measure, float(x[j]), med, float(scores[j]) if scores is not None else None)
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    out = []
    if not ranked:
        return out
    outer, under = collective_mask(ensemble)
    steps = np.array([c.step_count for c in ensemble.columns], float)
    per_step = _compute(ensemble, np.asarray(ensemble.incl.get(metric)), outer) / steps
    median_row = np.median(per_step, axis=1)
    for j, (_, measure, value, med, score) in ranked:
        start = ensemble.find([measure.split(" ", 1)[1]]) if measure.startswith("phase ") else 0
        excess = per_step[:, j] - median_row
        node = _walk_down(ensemble, excess, under, start or 0)
        kids = [k for k in ensemble.children(node) if not under[k] and excess[k] > 0]
        top = sorted(kids, key=lambda k: -excess[k])[:explain]
        out.append(Outlier(times[j].rank, times[j].host, j, measure, value, med, score, times[j].wait, node,
                           [(k, float(excess[k])) for k in top]))
    return out


def _compute(ensemble: Ensemble, m: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """Inclusive values less the time under collectives: the compute each
    node holds (a waiting rank's subtree is not made slow by its wait)."""
    waits = np.where(outer[:, None], m, 0)
    for i in range(len(ensemble) - 1, 0, -1):
        if waits[i].any():
            waits[ensemble.parent[i]] += waits[i]
    return m - waits


def _robust_z(x: np.ndarray, med: float) -> np.ndarray:
    """(x - median) / (MAD × 1.4826); the mean absolute deviation (× 1.2533,
    its normal scale) where more than half the ranks sit on the median."""
    dev = np.abs(x - med)
    scale = MAD_SIGMA * float(np.median(dev)) or 1.2533 * float(dev.mean())
    if scale == 0:
        return np.zeros_like(x)
    return (x - med) / scale


def _walk_down(ensemble: Ensemble, excess: np.ndarray, under: np.ndarray, node: int) -> int:
    """From ``node``, follow the child (not a collective) with the most
    excess while it holds at least half of its parent's."""
    here = excess[node]
    while True:
        kids = [k for k in ensemble.children(node) if not under[k]]
        if not kids:
            return node
        best = max(kids, key=lambda k: excess[k])
        if excess[best] <= 0 or excess[best] < 0.5 * here:
            return node
        node, here = best, excess[best]
