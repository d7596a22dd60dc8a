"""Outlier ranks of a window, and the nodes that explain them.

Per rank (a column of a cross-rank `Ensemble`) and per step: the step time,
the compute time (the time of its operators, collectives left out: see
`work`) and each top-level phase's compute time. In synchronous training
every rank's step lasts as long as the slowest rank's, because the others
wait for it in or after their collectives; so a slow rank shows in compute,
and the ranks waiting for it do not: they are not called slow.

A rank is an outlier in a measure when, with `ROBUST_FROM` ranks or more,
its robust z-score (distance from the ranks' median in units of the median
absolute deviation, scaled to a normal's sigma) passes ``z``; with fewer
ranks, when it is ``ratio`` times the median (a median of three says little
about spread). Either way its excess must be at least ``min_excess`` of the
median step.
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
    # node's children: (child, excess per step)
    explain: list[tuple[int, float]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.value / self.median if self.median else float("inf")

    @property
    def excess(self) -> float:
        return self.value - self.median


def collective_mask(ensemble: Ensemble) -> tuple[np.ndarray, np.ndarray]:
    """(outermost collective nodes, nodes at or under a collective)."""
    n = len(ensemble)
    coll = np.array(
        [is_collective(f.kind, f.name) for f in (ensemble.node_frame(i) for i in range(n))], bool
    )
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
    """Step, compute (`work`), collective and per-phase compute per step, per rank."""
    return _rank_times(ensemble, metric or time_metric(ensemble))[0]


def _rank_times(ensemble: Ensemble, metric: str) -> tuple[list[RankTimes], np.ndarray]:
    """`rank_times`, and the (nodes, ranks) work per step it was taken from."""
    m = np.asarray(
        ensemble.incl.get(metric, np.zeros((len(ensemble), len(ensemble.columns)), np.int64))
    )
    outer, _ = collective_mask(ensemble)
    steps = np.array([c.step_count for c in ensemble.columns], float)
    done = work(ensemble, m) / steps
    wait = m[outer].sum(axis=0) / steps
    phases = [k for k in ensemble.children(0) if ensemble.node_frame(k).kind == "phase"]
    out = []
    for j, col in enumerate(ensemble.columns):
        step = float(np.median(col.step_times_ns)) if col.step_times_ns else m[0, j] / steps[j]
        out.append(
            RankTimes(
                j,
                col.rank,
                col.host,
                step,
                float(done[0, j]),
                float(wait[j]),
                {ensemble.node_frame(p).name: float(done[p, j]) for p in phases},
            )
        )
    return out, done


def work(ensemble: Ensemble, m: np.ndarray) -> np.ndarray:
    """Per node and rank, the time of the operators (and kernels) at or under
    it, collectives left out: the work the rank did there. Not the Python
    between operators, nor a wait outside any operator's scope: DDP waits
    for its all-reduce after the backward pass, in no collective's scope, and
    the ranks waiting for a slow one must not look slow. Inside an operator a
    node's work is its own time. A tree without operators (a Python-only
    workload) has its inclusive time, less collectives, as work."""
    n = len(ensemble)
    kinds = [ensemble.node_frame(i).kind for i in range(n)]
    unit = np.array([k in ("operator", "kernel") for k in kinds])
    outer, under = collective_mask(ensemble)
    if not unit[~under].any():
        waits = np.where(outer[:, None], m, 0)
        for i in range(n - 1, 0, -1):
            if waits[i].any():
                waits[ensemble.parent[i]] += waits[i]
        return m - waits
    inside = np.zeros(n, bool)  # strictly under an operator or kernel
    for i in range(1, n):
        p = ensemble.parent[i]
        inside[i] = inside[p] or unit[p]
    counted = unit & ~inside & ~under  # the outermost operators that are not collectives
    out = np.where(counted[:, None], m, 0).astype(np.int64)
    for i in range(n - 1, 0, -1):
        if not inside[i] and out[i].any():
            out[ensemble.parent[i]] += out[i]
    keep = inside & ~under
    out[keep] = m[keep]
    return out


def _top_ancestor(ensemble: Ensemble) -> np.ndarray:
    """Per node, its ancestor among the root's children (0 for the root)."""
    top = np.zeros(len(ensemble), np.int64)
    for i in range(1, len(ensemble)):
        p = ensemble.parent[i]
        top[i] = i if p == 0 else top[p]
    return top


def outliers(
    ensemble: Ensemble,
    metric: str | None = None,
    z: float = 3.5,
    min_excess: float = 0.03,
    ratio: float = 1.2,
    explain: int = 5,
) -> list[Outlier]:
    """The outlier ranks of a cross-rank ensemble, most outlying first (one
    entry per rank: its most outlying measure); see the module docstring."""
    metric = metric or time_metric(ensemble)
    times, per_step = _rank_times(ensemble, metric)
    if len(times) < 2:
        return []
    measures = {"compute": [t.compute for t in times], "step": [t.step for t in times]}
    for name in times[0].phases:
        measures[f"phase {name}"] = [t.phases[name] for t in times]
    # An excess must matter to the step, not only to its measure: 30 us more
    # optimizer time is 14% of a short optimizer phase and 0.03% of the step.
    floor = min_excess * float(np.median([t.step for t in times]))
    best: dict[int, tuple[float, str, float, float, float | None]] = {}
    for measure, values in measures.items():
        x = np.asarray(values, float)
        med = float(np.median(x))
        if med <= 0:
            continue
        scores = _robust_z(x, med) if len(x) >= ROBUST_FROM else None
        for j in range(len(x)):
            if scores is not None:
                hit = scores[j] >= z and x[j] - med >= floor
                score = float(scores[j])
            else:
                hit, score = x[j] >= ratio * med and x[j] - med >= floor, x[j] / med
            if hit and (j not in best or score > best[j][0]):
                best[j] = (
                    score,
                    measure,
                    float(x[j]),
                    med,
                    float(scores[j]) if scores is not None else None,
                )
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    out = []
    if not ranked:
        return out
    _, under = collective_mask(ensemble)
    median_row = np.median(per_step, axis=1)
    for j, (_, measure, value, med, score) in ranked:
        excess = per_step[:, j] - median_row
        start = ensemble.find([measure.split(" ", 1)[1]]) if measure.startswith("phase ") else 0
        if not start:  # the phases split a step: name the one holding the most, even if under half
            start = max(ensemble.children(0), key=lambda k: excess[k], default=0)
        node = _walk_down(ensemble, excess, under, start or 0)
        kids = [k for k in ensemble.children(node) if not under[k] and excess[k] > 0]
        top = sorted(kids, key=lambda k: -excess[k])[:explain]
        out.append(
            Outlier(
                times[j].rank,
                times[j].host,
                j,
                measure,
                value,
                med,
                score,
                times[j].wait,
                node,
                [(k, float(excess[k])) for k in top],
            )
        )
    return out


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
