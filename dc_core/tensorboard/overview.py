"""What the tab shows around the tree: the run listing, one window's steps,
system series and findings, and the ranks of a window side by side."""

from __future__ import annotations

import statistics

import numpy as np  # a TensorBoard dependency

from ..analyzer import findings_of
from ..model import kinds
from ..model.window import steps_text, window_label
from ..store.profile import Profile, ProfileError
from . import shape
from .metadata import DATA_VERSION
from .params import MAX_NODES_PER_REQUEST, NotFound, format_window
from .store import Index, ProfileStore

MAX_SERIES_POINTS = 600

#: Monitor series that count up for the whole process (bytes read, written,
#: received, sent since it started): the tab draws their rate between samples,
#: a total that only grows says nothing about when the bytes moved.
CUMULATIVE = ("disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes")


def runs(store: ProfileStore) -> dict:
    """Runs, their ranks and windows, from file names only (nothing is read),
    and the profile's vocabulary (`dc_core.model.kinds.vocabulary`): the page
    names no metric, unit, kind or severity itself."""
    listing: dict[str, dict[int, dict]] = {}
    for file in store.files():
        ranks = listing.setdefault(file.run, {})
        entry = ranks.setdefault(
            file.rank, {"rank": file.rank, "host": file.host, "windows": [], "labels": {}}
        )
        window = format_window(file.steps)
        if window not in entry["windows"]:
            entry["windows"].append(window)
            entry["labels"][window] = steps_text(file.steps)  # what the selector shows: "steps 5–7"
    return {
        "data_version": DATA_VERSION,
        "vocabulary": kinds.vocabulary(),
        "max_nodes_per_request": MAX_NODES_PER_REQUEST,  # the page batches node lists to fit
        "runs": [
            {"run": run, "ranks": [ranks[r] for r in sorted(ranks)]}
            for run, ranks in listing.items()
        ],
        "errors": dict(store.errors),
    }


def _downsample(
    t_ns: list[int], values: list[float], limit: int = MAX_SERIES_POINTS
) -> tuple[list, list]:
    """Every k-th point, keeping the maximum of each bucket so spikes survive."""
    if len(values) <= limit:
        return list(t_ns), list(values)
    k = -(-len(values) // limit)
    ts, vs = [], []
    for i in range(0, len(values), k):
        bucket = values[i : i + k]
        j = max(range(len(bucket)), key=bucket.__getitem__)
        ts.append(t_ns[i + j])
        vs.append(bucket[j])
    return ts, vs


def rates(t_ns: list[int], values: list[float]) -> tuple[list[int], list[float]]:
    """Per second between consecutive samples of a counter, each at the later
    sample's time; a counter that went back (a restart) reads 0, not negative."""
    ts, vs = [], []
    for (t0, v0), (t1, v1) in zip(zip(t_ns, values), zip(t_ns[1:], values[1:])):
        if t1 > t0:
            ts.append(t1)
            vs.append(max(v1 - v0, 0) * 1e9 / (t1 - t0))
    return ts, vs


def series_label(name: str, device: int) -> str:
    """What a line of a chart is called: "cpu 3" for a core, "gpu 0" for a
    device, "all" for the whole process or host."""
    if device < 0:
        return "all"
    return f"{'cpu' if name.startswith('cpu') else 'gpu'} {device}"


def system_series(p: Profile) -> list[dict]:
    """The window's monitor series for the charts: times in seconds from the
    first sample, counters as rates (unit ``bytes/s``, ``rate`` true), at
    most `MAX_SERIES_POINTS` points each."""
    origin = min((s.t_ns[0] for s in p.system if s.t_ns), default=0)
    series = []
    for s in p.system:
        rate = s.name in CUMULATIVE
        ts, vs = _downsample(*(rates(s.t_ns, s.values) if rate else (s.t_ns, s.values)))
        series.append(
            {
                "name": s.name,
                "unit": f"{s.unit}/s" if rate else s.unit,
                "rate": rate,
                "device": s.device,
                "label": series_label(s.name, s.device),
                "t_s": [(t - origin) / 1e9 for t in ts],
                "values": vs,
            }
        )
    return series


def window(index: Index) -> dict:
    """Steps, system-monitor series, findings and environment of one window,
    with the metrics and frame kinds its tree holds (in vocabulary order)."""
    p = index.profile
    frame, size = index.tree.frame, len(index.tree)
    # below the root
    used = np.bincount(index.frame_array()[1:], minlength=len(index.tree.frames)) > 0
    present = {
        kinds.KINDS[c] for c in np.unique(index.kind_codes()[used]).tolist() if c < len(kinds.KINDS)
    }
    findings = []
    for f in findings_of(p):
        node = f.get("node", -1)
        findings.append(
            {
                **f,
                "node": node if 0 <= node < size else -1,
                "label": index.label(frame[node]) if 0 < node < size else "",
            }
        )
    stored = {"stored_rank": p.rank} if p.rank != index.ref.rank else {}
    return {
        # the rank is the directory's, as the listing and every request name it; a file
        # moved or copied from another rank's directory says its own beside it
        **index.ref.as_dict(),
        **stored,
        "label": window_label(index.ref.window, p.step_times_ns, p.planned_window),
        "host": p.host,
        "framework": p.framework,
        "mode": p.mode,
        "world_size": p.world_size,
        "steps": list(p.steps),
        "step_times_ns": list(p.step_times_ns),
        "duration_ns": p.duration_ns,
        "init_ns": p.init_ns,
        "nodes": size,
        "drops": dict(p.drops),
        "env": dict(p.env),
        "metrics": [m for m in kinds.METRICS if m in index.metrics],
        "kinds": [k for k in kinds.KINDS if k in present],
        "totals": {m: index.total(m) for m in index.metrics},
        "system": system_series(p),
        "findings": findings,
    }


def rank_summary(profile: Profile) -> dict:
    """Per-rank numbers for the comparison table (kept, the tree is not)."""
    tree = profile.tree
    totals = {m: sum(col) for m, col in tree.excl.items()}
    phases: dict[str, dict[str, int]] = {}
    under_root = np.flatnonzero(np.asarray(tree.parent, dtype=np.int64) == 0).tolist()
    top = [node for node in under_root if tree.node_frame(node).kind == "phase"]
    if top:
        incl = shape.inclusive(tree)
        for node in top:
            phases[tree.node_frame(node).name] = {
                m: int(column[node]) for m, column in incl.items()
            }
    steps = profile.step_times_ns
    return {
        "rank": profile.rank,
        "host": profile.host,
        "totals": totals,
        "phases": phases,
        "step_mean_ns": int(statistics.fmean(steps)) if steps else 0,
        "step_max_ns": max(steps) if steps else 0,
        "steps": len(steps),
    }


def ranks(store: ProfileStore, run: str, window_steps: tuple[int, int], metric: str) -> dict:
    """Every rank's summary for one window of ``run``, with each rank's
    ``metric`` total and mean step time relative to the median rank."""
    rows, errors = [], {}
    for file in store.files():
        if file.run != run or file.steps != window_steps:
            continue
        try:
            summary = store.summary(file, rank_summary)
            stored = {"stored_rank": summary["rank"]} if summary["rank"] != file.rank else {}
            # the directory's rank, as in /window
            rows.append({**summary, "rank": file.rank, **stored})
        except (ProfileError, NotFound) as exc:  # a bad file drops out of the table, the rest stays
            errors[f"{file.rank}-{file.host}"] = str(getattr(exc, "message", exc))
    for key, pick in (
        ("vs_median", lambda r: r["totals"].get(metric, 0)),
        ("step_vs_median", lambda r: r["step_mean_ns"]),
    ):
        values = [pick(r) for r in rows]
        median = statistics.median(values) if values else 0
        for r, v in zip(rows, values):
            r[key] = (v / median) if median else None
    phases = sorted({name for r in rows for name in r["phases"]})
    return {
        "run": run,
        "window": format_window(window_steps),
        "label": steps_text(window_steps),
        "metric": metric,
        "ranks": rows,
        "phases": phases,
        "errors": errors,
    }
