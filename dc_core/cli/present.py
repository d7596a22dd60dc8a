"""Profiles → the machine-readable report (the ``--json`` shape), the rows
the terminal report prints, rank statistics and value formatting: what the
commands present (``report``, ``trend``, ``diff``, ``export``, ``ranks``).
Pure functions; no I/O."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import views
from ..model.comm import by_module
from ..model.kinds import MEMORY_CATEGORIES, base_metric
from ..model.processors import merge_windows
from ..model.tree import Frame, Tree, frame_json
from ..model.views import View, flat
from ..model.window import one_off_first_step
from ..record.config import ProfilerConfig
from ..store.profile import DEVICE_MEMORY_FIELDS, DeviceMemory, Profile, ProfileError, memory_metric

REPORT_VERSION = 1
METRIC_PREFERENCE = ("device_time_ns", "cpu_time_ns", "samples", "count", "alloc_bytes", "flops")

#: The collectors' cap on system-monitor readings per window (``max_samples``
#: of `dc_core.collect.reference.Collector` and of the native one; a test pins them).
MONITOR_READINGS_CAP = 100_000


def metrics_with_values(tree: Tree) -> list[str]:
    """The metrics of ``tree`` holding a non-zero value, in column order."""
    return [m for m, column in tree.excl.items() if any(column)]


def describe_drops(drops: Mapping[str, int]) -> list[str]:
    """What each non-zero drop counter of a window means, one sentence each."""
    reasons = {
        "nodes": lambda n: (
            f"{n:,} new call paths not added: the window's tree reached its cap of max_nodes nodes "
            f"(default {ProfilerConfig.max_nodes:,}; the profile does not record the value used); their cost "
            "is counted on the deepest node already in the tree. Raise max_nodes (ProfilerConfig or "
            "DEEPCONTEXT_CONFIG)."
        ),
        "samples": lambda n: (
            f"{n:,} CPU samples lost or shallow: the sampler fell behind its rate, or a native stack could not be "
            "unwound (that sample is kept without its C/C++ frames); lower cpu_sampling_hz on a busy machine."
        ),
        "monitor": lambda n: (
            f"{n:,} system-monitor readings not kept: the window reached its cap of {MONITOR_READINGS_CAP:,} "
            "readings; raise system_interval_ms or profile fewer steps per window."
        ),
    }
    return [
        reasons[name](count) if name in reasons else f"{count:,} {name} dropped"
        for name, count in sorted(drops.items())
        if count > 0
    ]


def default_metric(tree: Tree) -> str:
    """The most telling metric this tree has (device time on GPUs, else CPU time...)."""
    for metric in METRIC_PREFERENCE:
        if tree.total(metric) > 0:
            return metric
    return "cpu_time_ns"


def node_json(
    shown: View,
    node: int = 0,
    depth: int | None = None,
    min_fraction: float = 0.0,
    metric: str | None = None,
) -> dict[str, Any]:
    """One NODE of the report of a view: frame fields, exclusive and inclusive metrics, children.

    Built with an explicit stack (a call chain may be any depth); serialise
    it with `dc_core.export.nested.dumps`, which does not recurse either."""
    tree = shown.tree
    metric = metric or default_metric(tree)
    columns = {m: shown.columns(m) for m in tree.excl}
    key = columns[metric][0] if metric in columns else [0] * len(tree)
    limit = key[0] * min_fraction
    excl_items = [(m, excl) for m, (_, excl) in columns.items()]
    incl_items = [(m, incl) for m, (incl, _) in columns.items()]
    top: list[dict[str, Any]] = []
    stack = [(node, 0, top)]  # (node, level, the list its JSON goes in)
    while stack:
        n, level, siblings = stack.pop()
        kids = (
            []
            if depth is not None and level >= depth
            else [k for k in tree.children(n) if key[k] >= limit]
        )
        kids.sort(key=lambda k: -key[k])
        item = {
            **frame_json(tree.node_frame(n)),
            "excl": {m: col[n] for m, col in excl_items},
            "incl": {m: col[n] for m, col in incl_items},
            "children": [],
        }
        siblings.append(item)
        stack.extend((k, level + 1, item["children"]) for k in reversed(kids))
    return top[0]


def profile_json(
    profile: Profile,
    view: str = "top-down",
    depth: int | None = None,
    min_fraction: float = 0.0,
    metric: str | None = None,
) -> dict[str, Any]:
    shown = views.view(profile.tree, view)
    return {
        "run": profile.run,
        "rank": profile.rank,
        "host": profile.host,
        "framework": profile.framework,
        "mode": profile.mode,
        "steps": [profile.steps[0], profile.steps[1]],  # half-open: [5, 8] is steps 5–7
        "step_times_ns": list(profile.step_times_ns),
        "one_off_first_step_ns": one_off_first_step(
            profile
        ),  # 0: the first step is like the others
        "tree": node_json(shown, 0, depth, min_fraction, metric),
        "memory": [memory_json(profile, m) for m in profile.memory],
        "memory_missing": list(profile.memory_missing),
        "memory_note": profile.memory_note,
        "communication": communication_json(profile),
        "findings": [{k: v for k, v in f.items() if k != "node"} for f in _findings(profile)],
    }


#: Communication by module, per step: (key, heading) in the order shown.
COMMUNICATION_COLUMNS = (
    ("compute_ns", "compute"),
    ("exposed_ns", "exposed comm"),
    ("runtime_ns", "sharding runtime"),
    ("comm_ns", "comm time"),
    ("bytes", "bytes moved"),
)


def communication_json(profile: Profile) -> list[dict[str, Any]]:
    """Per module served by collectives, most exposed first, its
    `COMMUNICATION_COLUMNS` per step (`dc_core.model.comm.by_module`; compute
    in host time), its collectives' count per step and its exposed time by
    ``"<phase> <operation>"`` per step; ``node``: its first module node
    (forward's where it ran forward)."""
    steps = max(len(profile.step_times_ns), profile.steps[1] - profile.steps[0], 1)
    out = []
    for row in by_module(profile.tree):
        item: dict[str, Any] = {"module": row.name, "node": row.nodes[0]}
        item.update({key: round(getattr(row, key) / steps) for key, _ in COMMUNICATION_COLUMNS})
        item["calls"] = row.calls / steps
        item["exposed_by"] = {k: round(v / steps) for k, v in row.exposed_by.items()}
        out.append(item)
    return out


def memory_categories(profile: Profile, device: DeviceMemory) -> dict[str, int]:
    """Bytes live at ``device``'s peak per category (`MEMORY_CATEGORIES`): the
    root's inclusive ``peak_live_bytes.<category>`` of that device."""
    tree = profile.tree
    out = {}
    for category in MEMORY_CATEGORIES:
        metric = memory_metric(f"peak_live_bytes.{category}", profile.memory, device.device)
        out[category] = tree.inclusive(metric)[0] if metric in tree.excl else 0
    return out


def peak_where(tree: Tree, node: int) -> tuple[Frame, Frame | None] | None:
    """The frame whose allocation reached a peak and its nearest module
    ancestor (None without one); None when the node is unknown (-1) or the
    root (billed to no context)."""
    if not 0 < node < len(tree):
        return None
    above = tree.path_frames(node)[:-1]
    module = next((f for f in reversed(above) if f.kind == "module"), None)
    return tree.node_frame(node), module


def memory_line(profile: Profile, device: DeviceMemory) -> str:
    """The report's line on one device's peak, after ``memory (<device>): ``:
    ``peak 36.1 MiB at step 3, backward, in aten::addmm under 0 (Linear) —
    parameter 8.0 MiB, temporary 3.1 MiB`` (categories of zero bytes left out)."""
    text = f"peak {format_value(device.peak_bytes, 'bytes')}"
    if device.peak_step >= 0:
        text += f" at step {device.peak_step}"
    where = peak_where(profile.tree, device.peak_node)
    places = [device.peak_phase] if device.peak_phase else []
    if where is not None:
        frame, module = where
        places.append(f"in {frame.label()}" + (f" under {module.label()}" if module else ""))
    text += "".join(f", {place}" for place in places)
    split = [
        f"{name} {format_value(value, 'bytes')}"
        for name, value in memory_categories(profile, device).items()
        if value
    ]
    return text + (" — " + ", ".join(split) if split else "")


def memory_json(profile: Profile, device: DeviceMemory) -> dict[str, Any]:
    """One device of the report's ``"memory"``: the `DeviceMemory` fields,
    ``"peak_path"`` (the labels from the root's child to the peak node; empty
    when unknown) and ``"categories"`` (`memory_categories`)."""
    out: dict[str, Any] = {name: getattr(device, name) for name in DEVICE_MEMORY_FIELDS}
    out["timeline_t_ns"], out["timeline_bytes"] = (
        list(device.timeline_t_ns),
        list(device.timeline_bytes),
    )
    known = 0 <= device.peak_node < len(profile.tree)
    out["peak_path"] = (
        [f.label() for f in profile.tree.path_frames(device.peak_node)] if known else []
    )
    out["categories"] = memory_categories(profile, device)
    return out


def report_json(
    profiles: Iterable[Profile], errors: Iterable[ProfileError], **options: Any
) -> dict[str, Any]:
    """The whole ``deepcontext report --json`` document."""
    return {
        "version": REPORT_VERSION,
        "profiles": [profile_json(p, **options) for p in profiles],
        "errors": [{"file": e.file, "message": e.message} for e in errors],
    }


@dataclass
class Row:
    """One printed line of the tree report."""

    depth: int
    frame: Frame
    incl: int
    excl: int
    percent: float


def tree_rows(
    shown: View, metric: str, depth: int | None = None, min_fraction: float = 0.0, limit: int = 200
) -> list[Row]:
    """Rows of the report of a view: heaviest first, at most ``limit``."""
    tree = shown.tree
    incl, excl = shown.columns(metric)
    total = incl[0] or 1
    rows: list[Row] = []
    stack = [(k, 0) for k in sorted(tree.children(0), key=lambda k: incl[k])]
    while stack and len(rows) < limit:
        node, level = stack.pop()
        if incl[node] < total * min_fraction or (incl[node] == 0 and excl[node] == 0):
            continue
        rows.append(
            Row(level, tree.node_frame(node), incl[node], excl[node], 100.0 * incl[node] / total)
        )
        if depth is None or level + 1 < depth:
            stack.extend((k, level + 1) for k in sorted(tree.children(node), key=lambda k: incl[k]))
    return rows


@dataclass
class RankStats:
    rank: int
    host: str
    steps: int
    median_ns: float
    p95_ns: float
    max_ns: int


def rank_step_stats(profiles: Sequence[Profile]) -> list[RankStats]:
    """Per-rank step-time statistics over every window of that rank."""
    by_rank: dict[int, list[Profile]] = {}
    for p in profiles:
        by_rank.setdefault(p.rank, []).append(p)
    out = []
    for rank, items in sorted(by_rank.items()):
        times = sorted(t for p in items for t in p.step_times_ns)
        if not times:
            continue
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        out.append(
            RankStats(rank, items[0].host, len(times), statistics.median(times), p95, times[-1])
        )
    return out


def format_value(value: float, metric: str) -> str:
    """Human units: 1.23 ms, 4.5 MiB, 1.2k."""
    metric = base_metric(metric)  # peak_live_bytes.gradient@cpu: bytes
    if metric.endswith("_ns"):
        for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {unit}"
        return f"{value:.0f} ns"
    if metric.endswith("bytes"):
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if abs(value) >= scale:
                return f"{value / scale:.1f} {unit}"
        return f"{value:.0f} B"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def rank_top_frames(
    profiles: Sequence[Profile], metric: str, limit: int = 8
) -> tuple[list[int], list[tuple[Frame, list[int]]]]:
    """The heaviest operator/module/kernel frames and their inclusive ``metric``
    on each rank (windows of a rank summed): ``(ranks, [(frame, values)])``."""
    by_rank: dict[int, list[Tree]] = {}
    for p in profiles:
        by_rank.setdefault(p.rank, []).append(p.tree)
    ranks = sorted(by_rank)
    per_rank = {
        r: {row.frame: row.incl.get(metric, 0) for row in flat(merge_windows(by_rank[r]))}
        for r in ranks
    }
    frames = {
        f
        for table in per_rank.values()
        for f in table
        if f.kind in ("operator", "module", "kernel")
    }
    ranked = sorted(frames, key=lambda f: -max(per_rank[r].get(f, 0) for r in ranks))[:limit]
    return ranks, [(f, [per_rank[r].get(f, 0) for r in ranks]) for f in ranked]


def _findings(profile: Profile) -> list[dict[str, Any]]:
    """The profile's findings, analysed here when it was written pending."""
    # Here: only the JSON document analyses, and `deepcontext export` imports
    # this module without needing the analyzer.
    from ..analyzer import findings_of

    return findings_of(profile)
