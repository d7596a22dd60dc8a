"""Rules over several profiles: ``load_imbalance`` across the ranks of one
window, ``memory_growth`` across the windows of one rank.

A finding here names its profile in ``evidence`` (``run``, ``rank``,
``steps``); `attach` stores it in that profile.
"""

from __future__ import annotations

from statistics import median
from typing import Any, Iterable

from ..profile import Profile
from ..tree import Frame
from .base import Window, finding, ms, percent
from .thresholds import Thresholds


def _where(p: Profile) -> dict[str, Any]:
    return {"run": p.run, "rank": p.rank, "steps": list(p.steps)}


class _Paths:
    """Call paths interned across the windows compared: equal ids, equal frame
    sequences from the root. One pass per tree; a tuple of frames per node
    would cost each node its depth (quadratic in a deep recursion)."""

    def __init__(self, windows: Iterable[Window]) -> None:
        self.ids: dict[tuple[int, Frame], int] = {}
        self.depth = [0]  # per id; id 0 is the root's empty path
        self.nodes: dict[int, dict[int, int]] = {id(w): self._intern(w) for w in windows}

    def _intern(self, w: Window) -> dict[int, int]:
        tree = w.tree
        path = [0] * len(tree)
        for n in tree.topdown():
            if n:
                key = (path[tree.parent[n]], tree.node_frame(n))
                pid = self.ids.get(key)
                if pid is None:
                    pid = self.ids[key] = len(self.depth)
                    self.depth.append(self.depth[key[0]] + 1)
                path[n] = pid
        return {pid: n for n, pid in enumerate(path) if n}

    def keyed(self, w: Window) -> dict[int, int]:
        """Path id → node of ``w``."""
        return self.nodes[id(w)]


def _step_ns(p: Profile, w: Window) -> float:
    return median(p.step_times_ns) if p.step_times_ns else w.cpu[0] / w.steps


def _excess_node(slow: Window, others: list[Window], paths: _Paths) -> int:
    """Walk down the slow rank's tree through the child with the most time above
    the ranks' median, while it explains at least half of its parent's excess."""
    keyed = [paths.keyed(o) for o in others]
    path_of = {n: pid for pid, n in paths.keyed(slow).items()}

    def excess(n: int) -> float:
        key = path_of.get(n)
        values = [o.incl[k[key]] if key in k else 0 for o, k in zip(others, keyed)]
        return slow.incl[n] - median(values + [slow.incl[n]])

    node, here = 0, slow.incl[0] - median([o.incl[0] for o in others] + [slow.incl[0]])
    while True:
        kids = [(excess(k), k) for k in slow.tree.children(node)]
        if not kids:
            return node
        best_excess, best = max(kids)
        if best_excess <= 0 or best_excess < 0.5 * here:
            return node
        node, here = best, best_excess


def load_imbalance(profiles: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """Per window: the slowest rank's median step ≥ ratio × the ranks' median
    (warning, naming the rank and the node holding its extra time); otherwise a
    node whose share of the window differs by ≥ share_diff between ranks (info)."""
    groups: dict[tuple, dict[int, Profile]] = {}
    for p in profiles:
        groups.setdefault((p.run, p.steps), {}).setdefault(p.rank, p)
    out = []
    for (_, steps), by_rank in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(by_rank) < 2:
            continue
        windows = {r: Window(p, t) for r, p in by_rank.items()}
        paths = _Paths(windows.values())
        step = {r: _step_ns(by_rank[r], windows[r]) for r in by_rank}
        med = median(step.values())
        slow_rank = max(step, key=step.get)
        ratio = step[slow_rank] / med if med else 0.0
        if ratio >= t["load_imbalance.ratio"]:
            slow = windows[slow_rank]
            node = _excess_node(slow, [w for r, w in windows.items() if r != slow_rank], paths)
            label = slow.tree.node_frame(node).label() if node else "time outside the profiled context"
            out.append(finding(
                "load_imbalance", "warning",
                f"rank {slow_rank} is {ratio:.2f}x slower than the median rank ({ms(step[slow_rank])} vs "
                f"{ms(med)} per step); its extra time is in {label}",
                "even out the work: check data sharding (sequence lengths per rank), rank-specific work "
                "(logging or checkpointing on rank 0), and the named node on that rank",
                slow.tree, node,
                {**_where(by_rank[slow_rank]), "ratio": round(ratio, 3), "step_ns": int(step[slow_rank]),
                 "median_step_ns": int(med), "step_ns_per_rank": {str(r): int(v) for r, v in sorted(step.items())}},
            ))
            continue
        found = _share_difference(windows, t, paths)
        if found:
            out.append(found)
    return out


def _share_difference(windows: dict[int, Window], t: Thresholds, paths: _Paths) -> dict[str, Any] | None:
    shares: dict[int, dict[int, float]] = {}
    for rank, w in windows.items():
        for key, node in paths.keyed(w).items():
            if w.kind(node) in ("phase", "python", "module", "operator", "compiled"):
                shares.setdefault(key, {})[rank] = w.share(node)
    best = None
    for key, per_rank in shares.items():
        values = [per_rank.get(r, 0.0) for r in windows]
        high, low = max(values), min(values)
        if high < t["load_imbalance.min_share"] or (high - low) / high < t["load_imbalance.share_diff"]:
            continue
        score = (round(high - low, 3), paths.depth[key])  # the largest gap, then the most specific node
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
        "load_imbalance", "info",
        f"{w.tree.node_frame(node).label()} takes {percent(high)} of the window on rank {rank} but "
        f"{percent(low)} on another rank",
        "the ranks do different work here: check data sharding and rank-specific code paths",
        w.tree, node,
        {**_where(w.profile), "share_per_rank": {str(r): round(per_rank.get(r, 0.0), 4) for r in sorted(windows)}},
    )


def memory_growth_windows(profiles: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """Host RSS rising from window to window of one rank (warning)."""
    by_rank: dict[tuple, list[Profile]] = {}
    for p in profiles:
        by_rank.setdefault((p.run, p.rank), []).append(p)
    out = []
    for (_, rank), runs in sorted(by_rank.items()):
        points = []
        for p in sorted(runs, key=lambda p: p.steps):
            values = [v for s in p.series("rss_bytes") for v in s.values]
            if values:
                points.append((p, median(values)))
        if len(points) < t["memory_growth.min_windows"]:
            continue
        medians = [m for _, m in points]
        growth = medians[-1] - medians[0]
        rising = all(b >= a for a, b in zip(medians, medians[1:]))
        limit = max(t["memory_growth.min_mb"] * 2**20, t["memory_growth.min_fraction"] * medians[0])
        if not rising or growth < limit:
            continue
        last = points[-1][0]
        out.append(finding(
            "memory_growth", "warning",
            f"rank {rank}'s host RSS rose in every window, from {medians[0] / 2**20:.0f} MiB (steps "
            f"{points[0][0].steps[0]}+) to {medians[-1] / 2**20:.0f} MiB (steps {last.steps[0]}+)",
            "look for tensors kept across steps: losses accumulated with their graph (use loss.item() or "
            ".detach()), growing lists or caches, hooks that store activations",
            None, -1,
            {**_where(last), "series": "rss_bytes", "windows": [list(p.steps) for p, _ in points],
             "median_bytes": [int(m) for m in medians], "growth_bytes": int(growth)},
        ))
    return out


def attach(profiles: Iterable[Profile], findings: list[dict[str, Any]]) -> None:
    """Append each cross-profile finding to the profile its evidence names."""
    index = {(p.run, p.rank, tuple(p.steps)): p for p in profiles}
    for f in findings:
        e = f.get("evidence", {})
        target = index.get((e.get("run"), e.get("rank"), tuple(e.get("steps", ()))))
        if target is not None:
            target.findings.append(f)
