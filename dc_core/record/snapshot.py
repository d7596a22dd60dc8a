"""Collector snapshot → `Profile`: decode frames, name unresolved native frames,
build the tree, turn monitor columns into series."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from ..collect import symbols
from ..model.kinds import KINDS, MONITOR_SERIES
from ..model.tree import Frame, fold_paths, from_columns
from ..store.profile import Profile, Series

_SCALAR_SERIES = tuple(name for name, (_, per_device) in MONITOR_SERIES.items() if not per_device)
_PER_DEVICE_SERIES = tuple(name for name, (_, per_device) in MONITOR_SERIES.items() if per_device)


def frames_from_snapshot(snap: Mapping[str, Any]) -> list[Frame]:
    strings = snap["strings"]
    f = snap["frames"]
    return [
        Frame(KINDS[k], strings[n], strings[fi], ln, strings[d], bool(fl & 1))
        for k, n, fi, ln, d, fl in zip(
            f["kind"], f["name"], f["file"], f["line"], f["detail"], f["flags"]
        )
    ]


def merge_equal_siblings(
    frames: Sequence[Frame],
    parent: Sequence[int],
    frame: Sequence[int],
    metrics: Mapping[str, Sequence[int]],
    folds_into: Callable[[Frame, Frame], bool] | None = None,
) -> tuple[list[Frame], list[int], list[int], dict[str, list[int]]]:
    """Columns in which equal frames are one frame and siblings with equal
    frames are one node, their metrics summed.

    Frames that were distinct in the collector (two addresses in one function)
    can be equal once resolved. With ``folds_into(parent_frame, frame)``, a
    node for which it holds is merged into its parent. Nodes come after their
    parents, as in a collector's snapshot; metric columns of another length are
    dropped, as `from_columns` drops them."""
    unique: dict[Frame, int] = {}
    frame_id = [unique.setdefault(f, len(unique)) for f in frames]
    new_parent, new_frame = [-1], [frame_id[frame[0]]]
    fold = (
        None
        if folds_into is None
        else lambda n: folds_into(frames[frame[parent[n]]], frames[frame[n]])
    )
    new_id = fold_paths(parent, frame_id, frame, new_parent, new_frame, {}, fold)
    new_metrics = {}
    for name, values in metrics.items():
        if len(values) != len(parent):
            continue
        column = [0] * len(new_parent)
        for node, value in enumerate(values):
            if value:
                column[new_id[node]] += value
        new_metrics[name] = column
    return list(unique), new_parent, new_frame, new_metrics


def series_from_monitor(monitor: Mapping[str, list], t0: int) -> list[Series]:
    """Monitor columns → series with times relative to the window start."""
    times = [t - t0 for t in monitor.get("t_ns", [])]
    out = []
    for name in _SCALAR_SERIES:
        values = monitor.get(name) or []
        if values:
            out.append(Series(name, -1, times[: len(values)], [float(v) for v in values]))
    for name in _PER_DEVICE_SERIES:
        rows = monitor.get(name) or []
        devices = max((len(r) for r in rows), default=0)
        for device in range(devices):
            pairs = [(t, r[device]) for t, r in zip(times, rows) if device < len(r)]
            out.append(Series(name, device, [t for t, _ in pairs], [float(v) for _, v in pairs]))
    return out


def profile_from_snapshot(
    snap: Mapping[str, Any],
    monitor: Mapping[str, list],
    *,
    window_t0: int,
    carried: MutableMapping[str, list[int]] | None = None,
    **fields: Any,
) -> Profile:
    """Build a `Profile` from ``Collector.snapshot()`` and ``monitor_samples()``.

    Native frames the collector left as library + offset are named here, once
    per address, from the libraries' symbol tables (`dc_core.collect.symbols`).
    Metric columns named with a key of ``carried`` travel with their nodes
    through that and leave the tree into ``carried`` (by the tree's node ids)."""
    frames = frames_from_snapshot(snap)
    parent, frame, metrics = snap["parent"], snap["frame"], dict(snap["metrics"])
    # Step bounds travel with the metrics through a merge of equal siblings
    # (summed: a lower and an upper bound stay one), then leave the tree.
    bounds = {_BOUND + name: column for name, column in snap.get("step_bounds", {}).items()}
    metrics.update(bounds)
    used = set(frame)
    if any(symbols.is_unresolved(frames[f]) for f in used):
        frames = symbols.resolve(frames, used)
        frames, parent, frame, metrics = merge_equal_siblings(
            frames, parent, frame, metrics, folds_into=symbols.folds_into
        )
    step_bounds = {
        name[len(_BOUND) :]: list(metrics.pop(name)) for name in bounds if name in metrics
    }
    for name in carried or ():
        carried[name] = list(metrics.pop(name, ()))
    tree = from_columns(frames, parent, frame, metrics, snap.get("units"))
    drops = {k: int(v) for k, v in snap.get("drops", {}).items()}
    return Profile(
        tree=tree,
        system=series_from_monitor(monitor, window_t0),
        drops=drops,
        step_bounds=step_bounds,
        **fields,
    )


def shift_step_bounds(
    snap: MutableMapping[str, Any], shifts: Mapping[int, tuple[int, int]]
) -> None:
    """Move a snapshot's ``cpu_time_ns`` step bounds by time an adapter moved
    between nodes after the steps were marked: per node, the least and the
    greatest change of one step. Each bound stays one (a lower bound of the
    quietest step, never below 0 where it was not; an upper of the busiest)."""
    bounds = snap.get("step_bounds") or {}
    low, high = bounds.get("cpu_time_ns.min"), bounds.get("cpu_time_ns.max")
    if low is None or high is None:
        return
    for node, (least, greatest) in shifts.items():
        if 0 <= node < len(low):
            was = low[node]
            low[node] = max(was + least, 0) if was >= 0 else was + least
            high[node] += greatest


_BOUND = "step bound "  # a name no metric has
