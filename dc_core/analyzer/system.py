"""System-monitor rules: ``low_gpu_utilization``, ``cpu_bottleneck``,
``io_bottleneck``, ``batch_size``, ``memory_growth`` (within a window).

Every rule needs at least ``system.min_samples`` samples and reports
p5/p50/p95 of what it looked at.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from .base import Window, finding, percent, percentile


def _stats(values: list[float]) -> dict[str, float]:
    return {f"p{q}": round(percentile(values, q), 2) for q in (5, 50, 95)}


def _enough(w: Window, values: list[float]) -> bool:
    return len(values) >= w.t["system.min_samples"]


def cpu_rows(w: Window) -> list[list[float]]:
    """Per sample, the utilisation of each core."""
    cores = sorted(w.profile.series("cpu_percent"), key=lambda s: s.device)
    return [list(row) for row in zip(*(s.values for s in cores))] if cores else []


def cpu_mean(w: Window) -> list[float]:
    return [sum(r) / len(r) for r in cpu_rows(w) if r]


def gpu_util(w: Window) -> dict[int, list[float]]:
    return {s.device: s.values for s in w.profile.series("gpu_util_percent") if s.values}


def low_gpu_utilization(w: Window) -> list[dict[str, Any]]:
    """A GPU whose p95 utilisation stays under max_p95 (warning)."""
    out = []
    for device, values in sorted(gpu_util(w).items()):
        if not _enough(w, values) or percentile(values, 95) >= w.t["low_gpu_utilization.max_p95"]:
            continue
        stats = _stats(values)
        out.append(
            finding(
                "low_gpu_utilization",
                "warning",
                f"GPU {device} is under-used: utilisation p5/p50/p95 = "
                f"{stats['p5']:g}/{stats['p50']:g}/{stats['p95']:g}%",
                "the GPU waits for the host: see dataloader_bottleneck, gpu_idle and host_sync findings; "
                "a larger batch, more DataLoader workers or torch.compile usually help",
                None,
                -1,
                {"device": device, "samples": len(values), **stats},
                gain_ns=None,
                gain_basis="a utilisation, not a cost: the findings on what the GPU waits for say the saving",
            )
        )
    return out


def cpu_bottleneck(w: Window) -> list[dict[str, Any]]:
    """CPUs saturated (p95 ≥ min_cpu_p95) while the GPUs are mostly idle (p50 <
    max_gpu_p50): the host limits training (warning). GPU jobs only: on a CPU
    job busy CPUs are the point."""
    gpus = gpu_util(w)
    cpu = cpu_mean(w)
    if not gpus or not _enough(w, cpu) or percentile(cpu, 95) < w.t["cpu_bottleneck.min_cpu_p95"]:
        return []
    gpu_p50 = max(percentile(v, 50) for v in gpus.values())
    if gpu_p50 >= w.t["cpu_bottleneck.max_gpu_p50"]:
        return []
    phases = [n for n in w.tree.children(0) if w.kind(n) == "phase"]
    hot = w.hot_context(max(phases, key=lambda p: w.cpu[p])) if phases else 0
    return [
        finding(
            "cpu_bottleneck",
            "warning",
            f"the CPUs are saturated (p95 {percentile(cpu, 95):.0f}%) while the GPU p50 is {gpu_p50:.0f}%",
            "move work off the host: more DataLoader workers, GPU-side augmentation, fewer Python-side "
            "loops in the step; check the hottest host context shown",
            w.tree,
            hot,
            {"cpu": _stats(cpu), "gpu_p50": round(gpu_p50, 2), "samples": len(cpu)},
            gain_ns=None,
            gain_basis="a utilisation, not a cost: the host-time findings say what moving work saves",
        )
    ]


def _disk_rate(w: Window) -> list[float]:
    """Disk read rate (bytes/s) between consecutive samples."""
    rates = []
    for s in w.profile.series("disk_read_bytes"):
        for (t0, v0), (t1, v1) in zip(zip(s.t_ns, s.values), zip(s.t_ns[1:], s.values[1:])):
            if t1 > t0:
                rates.append(max(v1 - v0, 0) * 1e9 / (t1 - t0))
    return rates


def io_bottleneck(w: Window) -> list[dict[str, Any]]:
    """The step waits on data (dataloader share ≥ min_wait_share) while no core
    is busy (busiest core p50 < max_cpu_p50): the loader waits on I/O, it does
    not compute (warning)."""
    phases = w.phase_nodes("dataloader")
    rows = cpu_rows(w)
    if not phases or not _enough(w, rows):
        return []
    share = sum(w.cpu[p] for p in phases) / w.host_total
    busiest = [max(r) for r in rows if r]
    if (
        share < w.t["io_bottleneck.min_wait_share"]
        or percentile(busiest, 50) >= w.t["io_bottleneck.max_cpu_p50"]
    ):
        return []
    hot = w.hot_context(max(phases, key=lambda p: w.cpu[p]))
    rates = _disk_rate(w)
    return [
        finding(
            "io_bottleneck",
            "warning",
            f"the step waits on data {percent(share)} of the time while no CPU core is busy "
            f"(busiest core p50 {percentile(busiest, 50):.0f}%): input I/O is the bottleneck",
            "read ahead: more DataLoader workers and prefetch_factor, local or cached copies of remote data, "
            "larger sequential files (WebDataset, TFRecord, Parquet) instead of many small ones",
            w.tree,
            hot,
            {
                "dataloader_share": round(share, 4),
                "busiest_core": _stats(busiest),
                "cpu": _stats(cpu_mean(w)),
                "disk_read_bytes_per_s": _stats(rates) if rates else {},
                "samples": len(rows),
            },
            gain_ns=w.mean_sum(phases, "cpu_time_ns"),
            gain_basis="the step's wait for data (mean per step): an upper bound, all of it hidden "
            "where reads keep ahead of the step",
        )
    ]


def batch_size(w: Window) -> list[dict[str, Any]]:
    """Every resource under-used (CPU, memory and, on GPU jobs, GPU utilisation
    p95 below their limits): a larger batch would use the machine (info)."""
    cpu = cpu_mean(w)
    mem = [v for s in w.profile.series("mem_used_percent") for v in s.values]
    if not _enough(w, cpu) or not _enough(w, mem):
        return []
    if (
        percentile(cpu, 95) >= w.t["batch_size.max_cpu_p95"]
        or percentile(mem, 95) >= w.t["batch_size.max_mem_p95"]
    ):
        return []
    gpus = gpu_util(w)
    if any(percentile(v, 95) >= w.t["batch_size.max_gpu_p95"] for v in gpus.values()):
        return []
    evidence = {"cpu": _stats(cpu), "mem_used_percent": _stats(mem), "samples": len(cpu)}
    evidence.update({f"gpu{d}": _stats(v) for d, v in gpus.items()})
    return [
        finding(
            "batch_size",
            "info",
            f"every resource is under-used (CPU p95 {percentile(cpu, 95):.0f}%, memory p95 {percentile(mem, 95):.0f}%"
            + (f", GPU p95 {max(percentile(v, 95) for v in gpus.values()):.0f}%" if gpus else "")
            + ")",
            "try a larger batch size (scale the learning rate with it), or a smaller instance",
            None,
            -1,
            evidence,
            gain_ns=None,
            gain_basis="spare capacity, not a cost: a larger batch raises throughput, not a step's time",
        )
    ]


def rising(values: list[float], min_fraction: float, min_bytes: float) -> dict[str, float] | None:
    """Growth evidence when the medians of the three thirds rise and the last
    exceeds the first by ``min_bytes`` and ``min_fraction``; else None."""
    k = len(values) // 3
    if k < 1:
        return None
    first, middle, last = (
        median(values[:k]),
        median(values[k:-k] or values[k : k + 1]),
        median(values[-k:]),
    )
    growth = last - first
    if not (first < middle < last) or growth < max(min_bytes, min_fraction * first):
        return None
    return {
        "first_bytes": int(first),
        "last_bytes": int(last),
        "growth_bytes": int(growth),
        "growth_fraction": round(growth / first, 4) if first else None,
    }


def _tensors_steady(w: Window, series_name: str, device: int, growth: float) -> str:
    """Where the window tracked the tensors of the series' device and their
    live total did not rise by half the series' growth: the sentence saying
    so ("" otherwise). Then the growth is not tensors kept: the allocator's
    heap settling (glibc keeps freed blocks once large frees raise its mmap
    threshold), or objects that are not tensors."""
    name = "cpu" if series_name == "rss_bytes" else f"cuda:{device}"
    tracked = next((m for m in w.profile.memory if m.device == name), None)
    if tracked is None or len(tracked.timeline_bytes) < 3:
        return ""
    if rising(tracked.timeline_bytes, 0.0, growth / 2) is not None:
        return ""
    first, last = tracked.timeline_bytes[0], tracked.timeline_bytes[-1]
    return (
        f" (the tensors tracked on {name} did not grow with it: {first / 2**20:.0f} MiB live at "
        f"the window's start, {last / 2**20:.0f} MiB at its end; the allocator's heap or "
        "objects other than tensors, not tensors kept)"
    )


def memory_growth(w: Window) -> list[dict[str, Any]]:
    """Host RSS or GPU memory rising steadily through the window: a possible
    leak (warning; info where the window's tracked tensors did not grow)."""
    out = []
    for s in w.profile.system:
        if s.name not in ("rss_bytes", "gpu_mem_bytes") or not _enough(w, s.values):
            continue
        grew = rising(
            s.values, w.t["memory_growth.min_fraction"], w.t["memory_growth.min_mb"] * 2**20
        )
        if grew is None:
            continue
        what = "host RSS" if s.name == "rss_bytes" else f"GPU {s.device} memory"
        # jax.profiler keeps a window's trace in host memory until it ends: the profiler's own growth
        traced = s.name == "rss_bytes" and w.profile.framework == "jax"
        steady = _tensors_steady(w, s.name, s.device, grew["growth_bytes"])
        out.append(
            finding(
                "memory_growth",
                "info" if traced or steady else "warning",
                f"{what} grew from {grew['first_bytes'] / 2**20:.0f} MiB to {grew['last_bytes'] / 2**20:.0f} MiB "
                "during the window"
                + (
                    " (jax.profiler holds the window's trace in host memory, a few KiB per host "
                    "event: within one window that cannot be told from a leak; a leak grows "
                    "from window to window)"
                    if traced
                    else steady
                ),
                "look for tensors kept across steps: losses accumulated with their graph (use loss.item() or "
                ".detach()), growing lists or caches, hooks that store activations",
                None,
                -1,
                {"series": s.name, "device": s.device, "samples": len(s.values), **grew},
                gain_ns=None,
                gain_basis="memory, not time: no saving per step can be estimated",
            )
        )
    return out
