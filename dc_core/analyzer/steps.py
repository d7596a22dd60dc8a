"""Step-time rules: ``step_outlier`` and ``initialization_time``."""

from __future__ import annotations

from statistics import mean, median, pstdev
from typing import Any

from .base import Window, finding, ms


def _step_spans(times: list[int]) -> list[tuple[int, int]]:
    """Each step's span relative to the window start, assuming back-to-back steps."""
    spans, t = [], 0
    for dt in times:
        spans.append((t, t + dt))
        t += dt
    return spans


def _what_differed(w: Window, slow: list[int]) -> dict[str, dict[str, float]]:
    """Mean of each system series during the slow steps vs the other steps."""
    spans = _step_spans(w.profile.step_times_ns)
    slow_spans = [spans[i] for i in slow]
    out = {}
    for series in w.profile.system:
        inside, outside = [], []
        for t, v in zip(series.t_ns, series.values):
            (inside if any(a <= t < b for a, b in slow_spans) else outside).append(v)
        if inside and outside and (mean(inside) or mean(outside)):
            key = series.name if series.device < 0 else f"{series.name}[{series.device}]"
            out[key] = {"slow": round(mean(inside), 2), "other": round(mean(outside), 2)}
    return out


def step_outlier(w: Window) -> list[dict[str, Any]]:
    """Steps slower than mean + sigmas·σ of the *other* steps (with ≥ min_steps_sigma
    steps) or than median_ratio × median (warning).

    The other steps' mean and σ are used because with n steps a single outlier
    can never exceed its own sample's mean + 3σ for n ≤ 10."""
    times = w.profile.step_times_ns
    n = len(times)
    if n < min(w.t["step_outlier.min_steps_median"], w.t["step_outlier.min_steps_sigma"]):
        return []
    med = median(times)
    min_excess = w.t["step_outlier.min_excess_ms"] * 1e6
    slow, reasons = [], {}
    for i, t in enumerate(times):
        if t - med < min_excess:
            continue
        others = times[:i] + times[i + 1:]
        why = []
        if n >= w.t["step_outlier.min_steps_sigma"] and t > mean(others) + w.t["step_outlier.sigmas"] * pstdev(others):
            why.append("sigma")
        if n >= w.t["step_outlier.min_steps_median"] and t > w.t["step_outlier.median_ratio"] * med:
            why.append("median")
        if why:
            slow.append(i)
            reasons[w.profile.steps[0] + i] = why
    if not slow:
        return []
    first = w.profile.steps[0]
    steps = [first + i for i in slow]
    differed = _what_differed(w, slow)
    biggest = max(differed.items(), key=lambda kv: abs(kv[1]["slow"] - kv[1]["other"]) / max(abs(kv[1]["other"]), 1e-9),
                  default=None)
    extra = f"; {biggest[0]} was {biggest[1]['slow']:g} vs {biggest[1]['other']:g}" if biggest else ""
    return [finding(
        "step_outlier", "warning",
        f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))} took "
        f"{', '.join(ms(times[i]) for i in slow)} against a median of {ms(med)}{extra}",
        "look for work that runs only on some steps: periodic evaluation, checkpointing or logging, "
        "garbage collection, recompilation, a slow batch (variable sequence lengths)",
        None, -1,
        {"steps": steps, "times_ns": [times[i] for i in slow], "median_ns": int(med), "mean_ns": int(mean(times)),
         "stdev_ns": int(pstdev(times)), "reasons": reasons, "system_during_slow_steps": differed},
    )]


def initialization_time(w: Window) -> list[dict[str, Any]]:
    """Time from profiler start to the first step ≥ min_s (warning; critical past critical_s)."""
    init_ns = w.profile.init_ns
    if init_ns < 0 or init_ns < w.t["initialization_time.min_s"] * 1e9:
        return []
    steps = w.profile.step_times_ns
    per_step = median(steps) if steps else 0
    return [finding(
        "initialization_time",
        "critical" if init_ns >= w.t["initialization_time.critical_s"] * 1e9 else "warning",
        f"{init_ns / 1e9:.1f} s passed between starting the profiler and the first step"
        + (f" (as long as {init_ns / per_step:.0f} steps)" if per_step else ""),
        "find what runs before the first step: dataset indexing or downloads, model construction on the "
        "CPU before .to(device), checkpoint loading, torch.compile warm-up; cache or defer it",
        None, -1,
        {"init_ns": init_ns, "median_step_ns": int(per_step)},
    )]
