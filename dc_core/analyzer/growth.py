"""``memory_growth`` across the windows of one rank: the context that keeps
what it allocates, else host RSS rising from window to window.

Memory is tracked per window, from empty: blocks made before a window are not
in it (only parameters, gradients and optimizer state join it, as held).
So a leak does not show as live bytes growing from window to window; it shows
as a context that ends *every* window holding what it allocated in it, at
the same rate per step. A loop variable (``x = next(batch)``) also ends a
window holding something, one step's worth, freed in the next step: a
context is only said to keep bytes when it holds more than
``min_kept_steps`` steps' worth of its allocation (windows of 2 steps or
more). Its rate over the windows' span is the growth; the finding names the
most specific line holding it.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ..model.kinds import CONTEXT_KINDS
from ..model.window import steps_text
from ..store.profile import Profile, memory_metric
from .base import finding, located, size
from .ranks import Paths
from .thresholds import Thresholds

MIB = 1 << 20
#: Contexts named per rank, the fastest growing first.
TOP = 3

SUGGESTION = (
    "a tensor made here outlives its step: one appended to a list or added to a running total "
    "keeps its autograd graph and the activations that graph saved (store loss.item() or "
    "t.detach(), compute metrics under torch.no_grad()); or a cache or list that only grows"
)


def memory_growth_windows(profiles: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """Per (run, rank): the contexts keeping memory in every window (`kept_growth`),
    else host RSS rising in every window (warning)."""
    by_rank: dict[tuple[str, int], dict[tuple[int, int], Profile]] = {}
    for p in profiles:
        # A window read twice (one rank on two hosts) would tie its steps; keep the first.
        by_rank.setdefault((p.run, p.rank), {}).setdefault(tuple(p.steps), p)
    out = []
    for (_, rank), windows in sorted(by_rank.items()):
        ordered = [windows[s] for s in sorted(windows)]
        found = kept_growth(ordered, t)
        if not found:
            rss = _rss_growth(ordered, rank, t)
            found = [rss] if rss else []
        out.extend(found)
    return out


def _steps(p: Profile) -> int:
    start, end = p.steps
    return max(len(p.step_times_ns), end - start, 1)


def _device(p: Profile, name: str):
    return next((m for m in p.memory if m.device == name), None)


def _in_backward(p: Profile) -> list[bool]:
    """Per node, whether it is under the backward phase. The backward makes the
    gradients, which gradient accumulation keeps over several steps: a
    backward context holding them at a window's end is no leak."""
    tree, out = p.tree, [False] * len(p.tree)
    for n in tree.topdown():
        if n:
            frame = tree.node_frame(n)
            out[n] = frame.name == "backward" if frame.kind == "phase" else out[tree.parent[n]]
    return out


def kept_growth(ordered: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """The contexts of one rank's windows (in step order) that keep memory:
    in each of ≥ min_windows windows of 2 steps or more, more than
    ``min_kept_steps`` steps' worth of what they allocated on the main
    device (outside the backward) is still held at the window's end, at rates per step within
    ``min_steady`` of each other, and the rate over the windows' span
    reaches ``min_mb`` and ``min_fraction`` of the first window's peak."""
    with_memory = [p for p in ordered if p.memory]
    if not with_memory:
        return []
    device = with_memory[-1].memory[0].device
    windows = [p for p in with_memory if _device(p, device) and _steps(p) >= 2]
    if len(windows) < t["memory_growth.min_windows"]:
        return []
    paths = Paths(windows)
    keeps: dict[int, list[tuple[int, int, int]]] = {}  # path id -> per window (kept, alloc, steps)
    for p in windows:
        alloc = p.tree.inclusive(memory_metric("alloc_bytes", p.memory, device))
        freed = p.tree.inclusive(memory_metric("free_bytes", p.memory, device))
        backward = _in_backward(p)
        steps = _steps(p)
        for pid, n in paths.keyed(p).items():
            kept = alloc[n] - freed[n]
            if (
                kept > 0
                and kept * steps > t["memory_growth.min_kept_steps"] * alloc[n]
                and p.tree.node_frame(n).kind in CONTEXT_KINDS
                and not backward[n]
            ):
                keeps.setdefault(pid, []).append((kept, alloc[n], steps))
    span = windows[-1].steps[1] - windows[0].steps[0]
    floor = max(
        t["memory_growth.min_mb"] * MIB,
        t["memory_growth.min_fraction"] * _device(windows[0], device).peak_bytes,
    )
    rates = {}
    for pid, per in keeps.items():
        if len(per) < len(windows):
            continue
        each = [kept / steps for kept, _, steps in per]
        rate = sum(each) / len(each)
        if min(each) >= t["memory_growth.min_steady"] * max(each) and rate * span >= floor:
            rates[pid] = rate
    named = _most_specific(windows[-1], paths, rates, {pid: keeps[pid][-1][0] for pid in rates})
    named.sort(key=lambda pid: -rates[pid])
    return [
        _kept_finding(windows, paths, pid, keeps[pid], rates[pid], device) for pid in named[:TOP]
    ]


def _most_specific(
    last: Profile, paths: Paths, rates: dict[int, float], kept: dict[int, int]
) -> list[int]:
    """Of the keeping contexts (lines where any keep, else all), each outermost
    one walked down through the one below it holding half its bytes or more."""
    node_of = paths.keyed(last)
    lines = {pid for pid in rates if last.tree.node_frame(node_of[pid]).kind == "python"}
    chosen = lines or set(rates)
    below: dict[int, list[int]] = {}
    for pid in sorted(chosen):
        up = paths.parent[pid]
        while up > 0 and up not in chosen:
            up = paths.parent[up]
        below.setdefault(max(up, 0), []).append(pid)
    named = []
    for pid in below.get(0, []):
        while True:
            best = max(below.get(pid, []), key=kept.__getitem__, default=None)
            if best is None or 2 * kept[best] < kept[pid]:
                break
            pid = best
        named.append(pid)
    return named


def _kept_finding(
    windows: list[Profile],
    paths: Paths,
    pid: int,
    per: list[tuple[int, int, int]],
    rate: float,
    device: str,
) -> dict[str, Any]:
    first, last = windows[0], windows[-1]
    node = paths.keyed(last)[pid]
    growth = rate * (last.steps[1] - first.steps[0])
    kept, alloc, _ = per[-1]
    evidence: dict[str, Any] = {
        **located(last),
        "device": device,
        "windows": [list(p.steps) for p in windows],
        "kept_bytes": [k for k, _, _ in per],
        "alloc_bytes": [a for _, a, _ in per],
        "kept_per_step_bytes": int(rate),
        "growth_bytes": int(growth),
    }
    if device != "cpu":  # the CUDA allocator's own total counts every block, old ones too
        evidence["allocator_peak_bytes"] = [
            _device(p, device).allocator_peak_bytes for p in windows
        ]
    rss = [
        median(v) for p in windows if (v := [x for s in p.series("rss_bytes") for x in s.values])
    ]
    if len(rss) == len(windows):
        evidence["rss_median_bytes"] = [int(v) for v in rss]
    return finding(
        "memory_growth",
        "warning",
        f"{last.tree.node_frame(node).label()} keeps ≈ {size(rate)} per step that it never frees: "
        f"each of {len(windows)} windows ({steps_text(first.steps)} … {steps_text(last.steps)}) ends "
        f"with it holding {size(kept)} of the {size(alloc)} it allocated there; ≈ {size(growth)} "
        f"more at the {device} memory peak from step {first.steps[0]} to step {last.steps[1] - 1}, "
        "and growing",
        SUGGESTION,
        last.tree,
        node,
        evidence,
        gain_ns=None,
        gain_bytes=growth,
        gain_basis="memory, not time: the bytes it allocated and still held at each window's end, "
        "per step of the window, times the steps from the first window's start to the last one's "
        "end; it goes on growing after that",
    )


def _rss_growth(ordered: list[Profile], rank: int, t: Thresholds) -> dict[str, Any] | None:
    """Host RSS rising from window to window (the windows' medians), by
    ``min_mb`` and ``min_fraction`` in all; no context named."""
    points = []
    for p in ordered:
        values = [v for s in p.series("rss_bytes") for v in s.values]
        if values:
            points.append((p, median(values)))
    if len(points) < t["memory_growth.min_windows"]:
        return None
    medians = [m for _, m in points]
    growth = medians[-1] - medians[0]
    rising = all(b >= a for a, b in zip(medians, medians[1:]))
    limit = max(t["memory_growth.min_mb"] * MIB, t["memory_growth.min_fraction"] * medians[0])
    if not rising or growth < limit:
        return None
    last = points[-1][0]
    return finding(
        "memory_growth",
        "warning",
        f"rank {rank}'s host RSS rose in every window, from {medians[0] / MIB:.0f} MiB (steps "
        f"{points[0][0].steps[0]}+) to {medians[-1] / MIB:.0f} MiB (steps {last.steps[0]}+)",
        "look for tensors kept across steps: losses accumulated with their graph (use loss.item() or "
        ".detach()), growing lists or caches, hooks that store activations",
        None,
        -1,
        {
            **located(last),
            "series": "rss_bytes",
            "windows": [list(p.steps) for p, _ in points],
            "median_bytes": [int(m) for m in medians],
            "growth_bytes": int(growth),
        },
        gain_ns=None,
        gain_basis="memory, not time: no saving per step can be estimated",
    )
