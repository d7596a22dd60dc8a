"""Step-time rules: ``step_outlier`` and ``initialization_time``."""

from __future__ import annotations

from statistics import mean, median, pstdev
from typing import Any

from ..model.window import one_off_first_step
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


#: Scales the median absolute deviation to a standard deviation's size for normal data.
_MAD_TO_SIGMA = 1.4826


def _slow_steps(w: Window, times: list[int], med: float, mad: float) -> dict[int, list[str]]:
    """Index → why (``median``, ``sigma``) of each step slow enough to report."""
    n = len(times)
    min_excess = w.t["step_outlier.min_excess_ms"] * 1e6
    slow = {}
    for i, t in enumerate(times):
        if t - med < min_excess:
            continue
        why = []
        if (
            n >= w.t["step_outlier.min_steps_median"]
            and t >= w.t["step_outlier.median_ratio"] * med
        ):
            why.append("median")
        # median and MAD: slow steps cannot drag this yardstick along as they
        # drag a mean and standard deviation
        if (
            n >= w.t["step_outlier.min_steps_sigma"]
            and t - med > w.t["step_outlier.sigmas"] * _MAD_TO_SIGMA * mad
        ):
            why.append("sigma")
        if why:
            slow[i] = why
    return slow


def _severity(w: Window, times: list[int], med: float, slow: list[int]) -> tuple[str, str]:
    """``warning`` where machine noise cannot explain the slow steps, else
    ``info`` and why not, for the message."""
    if len(times) < w.t["step_outlier.warn_min_steps"]:
        return "info", f"{len(times)} steps are too few to tell a slow step from machine noise"
    far_ns = w.t["step_outlier.warn_excess_ms"] * 1e6
    far = [i for i in slow if times[i] - med >= far_ns]
    if len(far) >= 2 or any(times[i] >= w.t["step_outlier.warn_ratio"] * med for i in far):
        return "warning", ""
    if not far:
        return "info", f"less than {ms(far_ns)} above the median may be machine noise"
    return "info", f"a single step {times[far[0]] / med:.1f}x the median may be machine noise"


def step_outlier(w: Window) -> list[dict[str, Any]]:
    """Steps at median_ratio × the median, or sigmas robust σ (1.4826 × MAD)
    above it with ≥ min_steps_sigma steps, and min_excess_ms or more above it.

    A warning only where machine noise cannot explain them (``_severity``):
    with fewer than warn_min_steps steps, or a single step under warn_ratio ×
    the median, an info note."""
    times = w.profile.step_times_ns
    n = len(times)
    if n < min(w.t["step_outlier.min_steps_median"], w.t["step_outlier.min_steps_sigma"]):
        return []
    med = median(times)
    mad = median(abs(t - med) for t in times)
    slow_why = _slow_steps(w, times, med, mad)
    if one_off_first_step(w.profile):
        slow_why.pop(0, None)  # a process's first step: the report says what it paid once
    if not slow_why:
        return []
    slow = sorted(slow_why)
    # a slow step whose excess is mostly its thread waiting for a CPU is the
    # machine's, not the program's
    waits = w.stolen
    wait_med = median(waits) if waits else 0
    stolen = {
        i: waits[i] - wait_med
        for i in slow
        if waits and 2 * (waits[i] - wait_med) >= times[i] - med
    }
    own = [i for i in slow if i not in stolen]
    severity, caveat = _severity(w, times, med, own) if own else ("info", "")
    # what the step's thread waiting does not explain, the process's other
    # threads (intra-op workers the step waits on) may: their wait for a CPU
    # is known for the whole window only, so it must cover all of it
    unexplained = sum(times[i] - med - (max(waits[i] - wait_med, 0) if waits else 0) for i in own)
    others = max(w.profile.others_wait_ns, 0)
    if severity == "warning" and others >= unexplained:
        severity, caveat = (
            "info",
            f"the process's other threads waited {ms(others)} for a CPU in the window, "
            "as much as these steps' excess: the host's load may be all of it",
        )
    if stolen:
        taken = sum(stolen.values())
        caveat = "; ".join(
            filter(
                None,
                [
                    caveat,
                    f"the host gave {ms(taken)} of "
                    f"{'them' if len(stolen) > 1 else 'it'} to other work",
                ],
            )
        )
    first = w.profile.steps[0]
    steps = [first + i for i in slow]
    differed = _what_differed(w, slow)
    biggest = max(
        differed.items(),
        key=lambda kv: abs(kv[1]["slow"] - kv[1]["other"]) / max(abs(kv[1]["other"]), 1e-9),
        default=None,
    )
    extra = (
        f"; {biggest[0]} was {biggest[1]['slow']:g} vs {biggest[1]['other']:g}" if biggest else ""
    )
    return [
        finding(
            "step_outlier",
            severity,
            f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))} took "
            f"{', '.join(ms(times[i]) for i in slow)} against a median of {ms(med)}{extra}"
            + (f" ({caveat})" if caveat else ""),
            "look for work that runs only on some steps: periodic evaluation, checkpointing or logging, "
            "garbage collection, recompilation, a slow batch (variable sequence lengths)",
            None,
            -1,
            {
                "steps": steps,
                "times_ns": [times[i] for i in slow],
                "median_ns": int(med),
                "mad_ns": int(mad),
                "mean_ns": int(mean(times)),
                "stdev_ns": int(pstdev(times)),
                "reasons": {first + i: slow_why[i] for i in slow},
                "system_during_slow_steps": differed,
                "stolen_ns": {first + i: int(v) for i, v in stolen.items()},
            },
            gain_ns=sum(times[i] - med for i in own) / n,
            gain_basis="the slow steps' time above the median step, less what the host gave to other work, "
            "spread over the window's steps: the saving if they ran like the median",
        )
    ]


def initialization_time(w: Window) -> list[dict[str, Any]]:
    """Time from profiler start to the first step ≥ min_s (warning; critical past critical_s)."""
    init_ns = w.profile.init_ns
    if init_ns < 0 or init_ns < w.t["initialization_time.min_s"] * 1e9:
        return []
    steps = w.profile.step_times_ns
    per_step = median(steps) if steps else 0
    return [
        finding(
            "initialization_time",
            "critical" if init_ns >= w.t["initialization_time.critical_s"] * 1e9 else "warning",
            f"{init_ns / 1e9:.1f} s passed between starting the profiler and the first step"
            + (f" (as long as {init_ns / per_step:.0f} steps)" if per_step else ""),
            "find what runs before the first step: dataset indexing or downloads, model construction on the "
            "CPU before .to(device), checkpoint loading, torch.compile warm-up; cache or defer it",
            None,
            -1,
            {"init_ns": init_ns, "median_step_ns": int(per_step)},
            gain_ns=None,
            gain_basis="a one-off before the first step: it saves start-up time, not time per step",
        )
    ]
