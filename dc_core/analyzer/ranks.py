"""Rules over several profiles: ``load_imbalance`` across the ranks of one
window (robust outlier ranks from `ROBUST_FROM` ranks on, a work ratio below);
``memory_growth`` across the windows of one rank is `growth`'s.

A finding here names its profile in ``evidence`` (``run``, ``rank``,
``steps``); `attach` stores it in that profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import median
from typing import Any

from ..ensemble import PATH_SEP, Ensemble, cross_rank, merge
from ..ensemble.outliers import ROBUST_FROM, outliers
from ..model.comm import has_communication
from ..model.opnames import is_collective
from ..model.tree import Frame
from ..store.logdir import ProfileFile, read_profile
from ..store.profile import Profile
from .base import Window, finding, located, ms, percent
from .busy import busy_straggler
from .communication import waiting_for
from .thresholds import Thresholds


class Paths:
    """Call paths interned across the windows compared: equal ids, equal frame
    sequences from the root. One pass per tree; a tuple of frames per node
    would cost each node its depth (quadratic in a deep recursion). Windows
    or profiles: anything with a ``tree``."""

    def __init__(self, windows: Iterable[Window | Profile]) -> None:
        self.ids: dict[tuple[int, Frame], int] = {}
        self.depth = [0]  # per id; id 0 is the root's empty path
        self.parent = [-1]  # per id, its parent's id
        self.nodes: dict[int, dict[int, int]] = {id(w): self._intern(w) for w in windows}

    def _intern(self, w: Window | Profile) -> dict[int, int]:
        tree = w.tree
        path = [0] * len(tree)
        for n in tree.topdown():
            if n:
                key = (path[tree.parent[n]], tree.node_frame(n))
                pid = self.ids.get(key)
                if pid is None:
                    pid = self.ids[key] = len(self.depth)
                    self.depth.append(self.depth[key[0]] + 1)
                    self.parent.append(key[0])
                path[n] = pid
        return {pid: n for n, pid in enumerate(path) if n}

    def keyed(self, w: Window | Profile) -> dict[int, int]:
        """Path id → node of ``w``."""
        return self.nodes[id(w)]


def _step_ns(p: Profile, w: Window) -> float:
    return median(p.step_times_ns) if p.step_times_ns else w.cpu[0] / w.steps


def _common_work(windows: dict[int, Window], paths: Paths) -> dict[int, int]:
    """Per rank, its time in the top-level operators that every rank ran
    equally often (same call path, same count): work all ranks share, timed on
    each rank's own clock. Empty when there is no such work."""
    counts: dict[int, dict[int, int]] = {}  # path id -> rank -> calls
    nodes: dict[int, dict[int, int]] = {}  # rank -> path id -> node
    for rank, w in windows.items():
        path_of = {n: pid for pid, n in paths.keyed(w).items()}
        # a collective's time is the wait for the slowest rank: not work every rank shares
        nodes[rank] = {
            path_of[op]: op
            for op in w.top_ops
            if not is_collective(w.tree.node_frame(op).kind, w.tree.node_frame(op).name)
        }
        for pid, op in nodes[rank].items():
            counts.setdefault(pid, {})[rank] = w.tree.value(op, "count")
    common = [
        pid
        for pid, per_rank in counts.items()
        if len(per_rank) == len(windows) and len(set(per_rank.values())) == 1
    ]
    work = {rank: sum(windows[rank].incl[nodes[rank][pid]] for pid in common) for rank in windows}
    return work if all(work.values()) else {}


def _work_ratios(windows: dict[int, Window], paths: Paths, t: Thresholds) -> dict[int, float]:
    """Per rank, its window in units of its common work (``_common_work``),
    over the ranks' median of that. Load on a host stretches a rank's common
    work and its extra work alike, so it cancels out: on a loaded 2-core host
    even ranks stayed within 0.88-1.0 and one doing ~8x the work at 5-7, where
    step times had put a stretched even rank first (ranks sharing a host, a
    busy spell while one rank runs). Empty without enough common work (less
    than min_share of the median rank's window)."""
    common = _common_work(windows, paths)
    if (
        not common
        or median(common[r] / windows[r].total for r in windows) < t["load_imbalance.min_share"]
    ):
        return {}
    per_rank = {r: windows[r].total / common[r] for r in windows}
    med = median(per_rank.values())
    return {r: v / med for r, v in per_rank.items()}


def _excess_node(
    slow: Window,
    others: list[Window],
    paths: Paths,
    size: Callable[[Window, int], float],
    start: int = 0,
) -> tuple[int, float]:
    """Walk down the slow rank's tree from ``start`` through the child with the
    most time above the ranks' median, while it explains at least half of its
    parent's excess: that node and its excess. ``size(window, node)`` is the
    node's time in the unit the ranks are compared in."""
    keyed = [paths.keyed(o) for o in others]
    path_of = {n: pid for pid, n in paths.keyed(slow).items()}

    def excess(n: int) -> float:
        key = path_of.get(n) if n else 0
        values = [
            size(o, k[key] if key else 0) if not key or key in k else 0
            for o, k in zip(others, keyed)
        ]
        return size(slow, n) - median(values + [size(slow, n)])

    node, here = start, excess(start)
    while True:
        kids = [(excess(k), k) for k in slow.tree.children(node)]
        if not kids:
            return node, here
        best_excess, best = max(kids)
        if best_excess <= 0 or best_excess < 0.5 * here:
            return node, here
        node, here = best, best_excess


def _time(w: Window, node: int) -> float:
    return w.incl[node]


def _in_work(work: dict[int, float]) -> Callable[[Window, int], float]:
    """A node's size in units of its rank's common work (``_work_ratios``):
    what load on the rank's host does not change."""
    return lambda w, node: w.incl[node] * work[w.profile.rank] / w.total


def load_imbalance(profiles: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """Per window, a straggler rank (warning, see `_straggler`); otherwise a
    node whose share of the window differs by ≥ share_diff between ranks (info)."""
    groups: dict[tuple, dict[int, Profile]] = {}
    for p in profiles:
        groups.setdefault((p.run, p.steps), {}).setdefault(p.rank, p)
    out = []
    for _, by_rank in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(by_rank) < 2:
            continue
        if len(by_rank) >= ROBUST_FROM:
            found = _outlier_rank(by_rank, t)
            if found:
                out.append(found)
                continue
        windows = {r: Window(p, t) for r, p in by_rank.items()}
        paths = Paths(windows.values())
        found = (
            _straggler(windows, paths, t) if len(by_rank) < ROBUST_FROM else None
        ) or _share_difference(windows, t, paths)
        if found:
            out.append(found)
    return out


def _outlier_rank(by_rank: dict[int, Profile], t: Thresholds) -> dict[str, Any] | None:
    """`outlier_finding` of ranks already read."""
    ensemble, _ = merge([by_rank[r] for r in sorted(by_rank)])
    return outlier_finding(ensemble, t, by_rank.__getitem__)


def load_imbalance_files(
    files: list[ProfileFile], t: Thresholds, max_bytes: int
) -> list[dict[str, Any]]:
    """`load_imbalance` of one window of `ROBUST_FROM` ranks or more, from its
    files: streamed through the cross-rank index, never all trees in memory;
    only the outlier rank's file is read whole, to place the finding in it."""
    ensemble, _ = cross_rank(files, max_bytes)
    file_of = {f.rank: f for f in files}
    found = outlier_finding(ensemble, t, lambda rank: read_profile(file_of[rank], max_bytes))
    return [found] if found else []


def outlier_finding(
    ensemble: Ensemble, t: Thresholds, profile_of: Callable[[int], Profile]
) -> dict[str, Any] | None:
    """With `ROBUST_FROM` ranks or more: the most outlying rank by robust
    z-score of its step, compute or phase time (`dc_core.ensemble.outliers`),
    with the node holding its excess and that node's heaviest parts. Time in
    collectives is not compute, so the ranks waiting for a slow one are not
    named. ``profile_of(rank)`` gives the rank's profile the finding is stored in."""
    found = outliers(ensemble, z=t["load_imbalance.z"], min_excess=t["load_imbalance.min_excess"])
    if not found:
        return None
    top = found[0]
    slow = profile_of(top.rank)
    frames = [ensemble.node_frame(n) for n in ensemble.path(top.node)]
    node = _node_by_frames(slow.tree, frames)
    where = PATH_SEP.join(f.label() for f in frames) or "time outside the profiled context"
    parts = ", ".join(f"{ensemble.node_frame(k).label()} +{ms(v)}" for k, v in top.explain[:3])
    others = [o.rank for o in found[1:]]
    return finding(
        "load_imbalance",
        "warning",
        f"rank {top.rank} is an outlier among {len(ensemble.columns)} ranks: its {top.measure} time per step is "
        f"{ms(top.value)} against a median of {ms(top.median)} ({top.ratio:.2f}x, robust z {top.z:.1f}); its extra "
        f"{ms(top.excess)} per step is in {where}"
        + (f" ({parts})" if parts else "")
        + (f"; other outlier ranks: {', '.join(map(str, others[:8]))}" if others else ""),
        "even out the work: check data sharding (sequence lengths per rank), rank-specific work "
        "(logging or checkpointing on rank 0), and the named node on that rank; the other ranks wait for it "
        "in their collectives",
        slow.tree,
        node,
        {
            **located(slow),
            "measure": top.measure,
            "ratio": round(top.ratio, 3),
            "z": round(top.z or 0.0, 2),
            "value_ns": int(top.value),
            "median_ns": int(top.median),
            "wait_ns": int(top.wait),
            "nodes": [
                {
                    "path": [ensemble.node_frame(n).label() for n in ensemble.path(k)],
                    "excess_ns": int(v),
                }
                for k, v in top.explain
            ],
            "outlier_ranks": [o.rank for o in found],
        },
        gain_ns=top.excess,
        gain_basis=f"rank {top.rank}'s {top.measure} time per step above the median rank's: every rank waits "
        "for it, so evening the work out saves that much of each rank's step",
    )


def _node_by_frames(tree, frames: list[Frame]) -> int:
    """The node of ``tree`` at this path of frames (0 when it has none)."""
    node = 0
    for frame in frames:
        found = tree.find_child(node, frame)
        if found is None:
            return node
        node = found
    return node


def _straggler(windows: dict[int, Window], paths: Paths, t: Thresholds) -> dict[str, Any] | None:
    """The rank doing ≥ ratio × the median rank's work per step (its window
    against the work every rank shares, see `_work_ratios`), else the rank
    whose median step takes ≥ ratio × the ranks' median; named with the node
    holding its extra time. Work first: host load cannot fake it. Ranks that
    communicate end their steps together and their waits would count as
    work: they are weighed by busy time instead (`busy.busy_straggler`)."""
    if all(has_communication(w.tree) for w in windows.values()):
        others = {r: [o for q, o in windows.items() if q != r] for r in windows}
        return busy_straggler(
            windows,
            lambda size, start, slow: _excess_node(
                slow, others[slow.profile.rank], paths, size, start
            ),
            t,
        )
    step = {r: _step_ns(w.profile, w) for r, w in windows.items()}
    med = median(step.values())
    work = _work_ratios(windows, paths, t)
    if work and max(work.values()) >= t["load_imbalance.ratio"]:
        rank = max(work, key=work.get)
        measure, ratio, size = "work", work[rank], _in_work(work)
    else:
        rank = max(step, key=step.get)
        measure, ratio, size = "step_time", step[rank] / med if med else 0.0, _time
    if ratio < t["load_imbalance.ratio"]:
        return None
    slow = windows[rank]
    node, _ = _excess_node(slow, [w for r, w in windows.items() if r != rank], paths, size)
    label = slow.tree.node_frame(node).label() if node else "time outside the profiled context"
    per_step = f"{ms(step[rank])} vs {ms(med)} per step"
    head = (
        f"rank {rank} does {ratio:.2f}x the work of the median rank per step (timed against the operators "
        f"every rank runs alike; {per_step})"
        if measure == "work"
        else f"rank {rank} is {ratio:.2f}x slower than the median rank ({per_step})"
    )
    return finding(
        "load_imbalance",
        "warning",
        f"{head}; its extra time is in {label}",
        "even out the work: check data sharding (sequence lengths per rank), rank-specific work "
        "(logging or checkpointing on rank 0), and the named node on that rank",
        slow.tree,
        node,
        {
            **located(slow.profile),
            "measure": measure,
            "ratio": round(ratio, 3),
            "step_time_ratio": round(step[rank] / med if med else 0.0, 3),
            **(
                {"work_ratio_per_rank": {str(r): round(v, 3) for r, v in sorted(work.items())}}
                if work
                else {}
            ),
            "step_ns": int(step[rank]),
            "median_step_ns": int(med),
            "step_ns_per_rank": {str(r): int(v) for r, v in sorted(step.items())},
        },
        gain_ns=step[rank] - med,
        gain_basis=f"rank {rank}'s step time above the median rank's: an upper bound, the others wait for it "
        "in their collectives",
    )


def _share_difference(
    windows: dict[int, Window], t: Thresholds, paths: Paths
) -> dict[str, Any] | None:
    shares: dict[int, dict[int, float]] = {}
    for rank, w in windows.items():
        for key, node in paths.keyed(w).items():
            if w.kind(node) in ("phase", "python", "module", "operator", "compiled"):
                shares.setdefault(key, {})[rank] = w.share(node)
    best = None
    for key, per_rank in shares.items():
        values = [per_rank.get(r, 0.0) for r in windows]
        high, low = max(values), min(values)
        if (
            high < t["load_imbalance.min_share"]
            or (high - low) / high < t["load_imbalance.share_diff"]
        ):
            continue
        # the largest gap, then the most specific node
        score = (
            round(high - low, 3),
            paths.depth[key],
        )
        if best is None or score > best[0]:
            best = (score, key, per_rank)
    if best is None:
        return None
    _, key, per_rank = best
    rank = max(windows, key=lambda r: per_rank.get(r, 0.0))
    w = windows[rank]
    node = paths.keyed(w)[key]
    high, low = per_rank[rank], min(per_rank.get(r, 0.0) for r in windows)
    return finding(
        "load_imbalance",
        "info",
        f"{w.tree.node_frame(node).label()} takes {percent(high)} of the window on rank {rank} but "
        f"{percent(low)} on another rank",
        "the ranks do different work here: check data sharding and rank-specific code paths",
        w.tree,
        node,
        {
            **located(w.profile),
            "share_per_rank": {str(r): round(per_rank.get(r, 0.0), 4) for r in sorted(windows)},
        },
        gain_ns=None,
        gain_basis="a difference between ranks' shares, not a cost: no saving can be estimated",
    )


def attach(profiles: Iterable[Profile], findings: list[dict[str, Any]]) -> None:
    """Append each cross-profile finding to the profile its evidence names;
    the other ranks of a straggler's window have their ``exposed_communication``
    findings told that they wait for it (`communication.waiting_for`)."""
    profiles = list(profiles)
    index = {(p.run, p.rank, tuple(p.steps)): p for p in profiles}
    stragglers: dict[tuple, list[dict[str, Any]]] = {}
    for f in findings:
        e = f.get("evidence", {})
        target = index.get((e.get("run"), e.get("rank"), tuple(e.get("steps", ()))))
        if target is not None:
            target.findings.append(f)
        if f["rule"] == "load_imbalance":
            stragglers.setdefault((e.get("run"), tuple(e.get("steps", ()))), []).append(f)
    for p in profiles:
        if found := stragglers.get((p.run, tuple(p.steps))):
            p.findings = waiting_for(p.findings, found, p.rank)
