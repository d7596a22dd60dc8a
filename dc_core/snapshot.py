"""Collector snapshot → `Profile`: decode frames, build the tree, turn monitor
columns into series."""

from __future__ import annotations

from typing import Any, Mapping

from .profile import Profile, Series
from .tree import KINDS, Frame, from_columns

_SCALAR_SERIES = (
    "rss_bytes", "mem_used_percent", "disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes",
)
_PER_DEVICE_SERIES = ("cpu_percent", "gpu_util_percent", "gpu_mem_bytes")


def frames_from_snapshot(snap: Mapping[str, Any]) -> list[Frame]:
    strings = snap["strings"]
    f = snap["frames"]
    return [
        Frame(KINDS[k], strings[n], strings[fi], ln, strings[d], bool(fl & 1))
        for k, n, fi, ln, d, fl in zip(f["kind"], f["name"], f["file"], f["line"], f["detail"], f["flags"])
    ]


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
    snap: Mapping[str, Any], monitor: Mapping[str, list], *, window_t0: int, **fields: Any
) -> Profile:
    """Build a `Profile` from ``Collector.snapshot()`` and ``monitor_samples()``."""
    tree = from_columns(
        frames_from_snapshot(snap), snap["parent"], snap["frame"], snap["metrics"], snap.get("units")
    )
    drops = {k: int(v) for k, v in snap.get("drops", {}).items()}
    return Profile(tree=tree, system=series_from_monitor(monitor, window_t0), drops=drops, **fields)
