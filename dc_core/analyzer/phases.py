"""Phase-level rules: ``optimizer_unfused``, ``dataloader_bottleneck``, ``gpu_idle``."""

from __future__ import annotations

from statistics import median_low
from typing import Any

from ..model.comm import zero_settings
from .base import Window, finding, ms, op_name, percent


def optimizer_unfused(w: Window) -> list[dict[str, Any]]:
    """Optimizer phase ≥ min_share with many per-parameter operators and no
    foreach/fused kernels (warning; PyTorch's eager optimizers only)."""
    phases = w.phase_nodes("optimizer")
    if not phases or w.profile.framework == "jax":
        return []  # XLA compiles a JAX update into the step's program: there is nothing to launch per parameter
    if zero_settings(w.profile.env):
        # DeepSpeed ZeRO updates flat partitions, a tensor or a few per group:
        # the per-parameter operators of its step are the runtime's (gathering
        # and copying out the updated parameters), which no foreach changes
        return []
    share = w.quiet_share(phases)
    ops = [o for o in w.top_ops if w.phase(o) == "optimizer"]
    names = {op_name(w.tree.node_frame(o)) for o in ops}
    if any(n.startswith(("_foreach", "_fused")) for n in names):
        return []  # already multi-tensor
    per_step = sum(w.tree.value(o, "count") for o in ops) / w.steps
    if (
        share < w.t["optimizer_unfused.min_share"]
        or per_step < w.t["optimizer_unfused.min_ops_per_step"]
    ):
        return []
    node = max(phases, key=lambda p: w.incl[p])
    fused = _fused_steps(w, phases)
    gain, basis = _unfused_gain(w, phases, ops, fused)
    severity, caveat = w.judge("warning", gain)
    return [
        finding(
            "optimizer_unfused",
            severity,
            f"the optimizer step takes {percent(share)} of a step with {per_step:.0f} per-parameter "
            "operators per step" + (f" ({caveat})" if caveat else ""),
            f"construct {fused[0]} with fused=True (torch 2.4 or later on the CPU): one kernel updates every "
            "parameter of a group in one pass"
            if fused
            else "construct the optimizer with foreach=True so all parameters are updated by a few multi-tensor "
            "kernels",
            w.tree,
            node,
            {
                "share": round(share, 4),
                "ops_per_step": round(per_step, 1),
                "operators": sorted(names)[:10],
                "optimizer": fused[0] if fused else "",
                "metric": w.metric,
                "per_step_ns": w.spread(phases),
            },
            gain_ns=gain,
            gain_basis=basis,
        )
    ]


#: Torch's optimizers with a fused implementation on the CPU and CUDA (torch 2.4 or later).
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


def _fused_steps(w: Window, phases: list[int]) -> tuple[str, list[int]] | None:
    """The classes of the torch optimizers stepping in ``phases`` and their
    steps' nodes, where each has a fused implementation: a step's frame
    (``adam.py:214 AdamW.step``, named by the class the user built) says
    which. None where any other optimizer steps there, a subclass among them
    (its own step may not take ``fused``)."""
    classes, steps = set(), []
    for phase in phases:
        for n in w.tree.preorder(phase):
            f = w.tree.node_frame(n)
            cls, _, method = f.name.rpartition(".")
            if f.kind == "python" and method == "step" and "/torch/optim/" in f.file:
                if cls not in FUSED_OPTIMIZERS:
                    return None
                classes.add(cls)
                steps.append(n)
    return (" and ".join(sorted(classes)), steps) if steps else None


def _unfused_gain(
    w: Window, phases: list[int], ops: list[int], fused: tuple[str, list[int]] | None
) -> tuple[float, str]:
    """What the advice saves per step, and how that was estimated."""
    host = w.mean_sum(phases, "cpu_time_ns")
    if w.gpu and "device_time_ns" in w.tree.excl:
        # launches: the host's time beyond what the device ran for the update
        return max(host - w.mean_sum(phases, "device_time_ns"), 0.0), (
            "the optimizer's host time beyond its device time (mean per step): an upper bound, "
            "what its per-parameter launches cost"
        )
    if fused:
        # A fused step makes one pass over each parameter in C++: Adam over 600
        # tensors of 4x4 went from 14-16 ms to 2.5 ms a step (a pass 4 us a
        # parameter, about one of the unfused step's operators, 2.6 us each).
        # Its parameters: as many as its operators' median count per step
        # (one a parameter, or two; one made once, for a new state, is none).
        # The rest of the phase (gradient clipping, zero_grad) stays as it is.
        steps = fused[1]
        inside = {n for s in steps for n in w.tree.preorder(s)}
        step_ops = [o for o in ops if o in inside]
        calls = [w.tree.value(o, "count") for o in step_ops]
        if calls:
            params = median_low(calls) / w.steps
            cost = w.mean_sum(step_ops, "cpu_time_ns") * median_low(calls) / sum(calls)
            return max(w.mean_sum(steps, "cpu_time_ns") - cost, 0.0), (
                f"the optimizer step's host time (mean per step) less one of its operators' mean time for "
                f"each of its {params:.0f} parameters: what a fused pass over each costs"
            )
    op_ns = w.mean_sum(ops, "cpu_time_ns")
    # A multi-tensor step on the CPU still runs a kernel per tensor, in C++:
    # it saves the Python between the per-parameter calls, not all of it (the
    # multi-tensor Adam still reads each parameter's step count into Python).
    # Its kernels run one operator over every parameter before the next, so
    # where all of them overflow a cache that each one fits, the kernels slow
    # down: 200 tensors of 64x64 saved 42-66%.
    return max(host - op_ns, 0.0), (
        "the optimizer's Python around its per-parameter operators (mean per step): an upper bound, "
        "the operators' own time stays, and grows where the parameters overflow the CPU's cache "
        "once each multi-tensor operator runs over all of them"
    )


def dataloader_bottleneck(w: Window) -> list[dict[str, Any]]:
    """Dataloader phase ≥ min_share of the step time (warning; critical past critical_share)."""
    phases = w.phase_nodes("dataloader")
    if not phases:
        return []
    time_ns, share = _load_per_step(w, phases)
    if share < w.t["dataloader_bottleneck.min_share"]:
        return []
    phase = max(phases, key=lambda p: w.cpu[p])
    hot = w.hot_context(phase)
    where = f" mostly in {w.tree.node_frame(hot).label()}" if hot != phase else ""
    # Of a loaded host's marks, the step's few steps and its workers' wait
    # for a CPU (below) say something of a wait for batches; the process's
    # intra-op threads' wait stretches the step's own work, which shortens it.
    severity, caveat = (
        ("info", w.noise_caveat)
        if w.noise_caveat
        else ("critical" if share >= w.t["dataloader_bottleneck.critical_share"] else "warning", "")
    )
    mean_ns = w.mean_sum(phases, "cpu_time_ns")
    workers = _workers(w, mean_ns)
    alone = workers["idle_host_wait_ns"] if workers else 0
    if severity != "info" and _host_starved(w, mean_ns, workers):
        # the step waited for batches its workers were late with for want of
        # a CPU; with a core each they would keep it fed
        severity, caveat = (
            "info",
            f"the data loader's worker processes waited {ms(w.loader_waited)} per step for a CPU, "
            + (
                f"and with a core each would keep the step waiting only {ms(alone)}: "
                "the host's load may be the rest"
                if alone
                else "as much as the step waited for their batches: the host's load may be all of it"
            ),
        )
    elif severity != "info" and alone:  # workers too slow for the step on any host
        n = workers["workers"]
        caveat = (
            f"its {n} worker process{'es run' if n != 1 else ' runs'} {ms(workers['cpu_ns'])} of CPU "
            f"per step, the step {ms(workers['own_ns'])} of its own"
        )
    return [
        finding(
            "dataloader_bottleneck",
            severity,
            f"data loading takes {percent(share)} of step time ({ms(time_ns)} per step){where}"
            + (f" ({caveat})" if caveat else ""),
            "load data in the background: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
            "prefetch_factor=2+); make __getitem__ cheaper (cache decoded samples, move augmentation to the GPU)",
            w.tree,
            hot,
            {
                "share": round(share, 4),
                "time_ns": int(time_ns),
                "per_step_ns": int(time_ns),
                "hot_frame": w.tree.node_frame(hot).label(),
                "spread": w.spread(phases, "cpu_time_ns"),
                **({"workers": workers} if workers else {}),
            },
            gain_ns=mean_ns,
            gain_basis="the step's wait for its batch (mean per step): an upper bound, all of it hidden "
            "where workers prepare batches faster than the step uses them",
        )
    ]


def _load_per_step(w: Window, phases: list[int]) -> tuple[float, float]:
    """The step's wait for its batch in one step, and its share of the step.
    Where every step loaded one, as noise cannot make them: the quietest
    step's. A trainer's callbacks (Hugging Face's, Lightning's) fetch a step's
    batch before the step begins, so one step at the window's edge loads
    none and the quietest step's wait is 0: there, the loads' mean, against
    itself and the steps' mean time besides loading."""
    loads = sum(w.tree.value(p, "count") for p in phases)
    if loads >= w.steps or loads < 2 or not w.profile.step_times_ns:
        time_ns = w.quiet_sum(phases, "cpu_time_ns")
        return time_ns, time_ns / max(w.quiet(0, "cpu_time_ns"), 1)
    mean_ns = w.mean_sum(phases, "cpu_time_ns")
    load = mean_ns * w.steps / loads
    return load, load / max(load + _own_per_step(w, mean_ns), 1)


def _own_per_step(w: Window, loading_ns: float) -> int:
    """The step's mean time besides its mean ``loading_ns`` (step times known)."""
    times = w.profile.step_times_ns
    return max(round(sum(times) / len(times) - loading_ns), 0)


def _workers(w: Window, loading_ns: float) -> dict[str, Any] | None:
    """What the data loader's worker processes cost a step, where the window
    knows their CPU time: ``cpu_ns`` they ran per step, ``own_ns`` the step's
    own mean time (less its loading), and ``idle_host_wait_ns`` the wait for
    batches a host with a core for each worker would leave (their CPU per
    step spread over them, less the step's own time). None where unknown.
    The step's own time is its wall time, stretched where the host is
    loaded: less its thread's wait for a CPU it would be too short (part of
    that wait falls in the loading, a batch come and its thread runnable),
    and on a device its thread waits for kernels, not a CPU."""
    p = w.profile
    if p.loader_cpu_ns < 0 or p.loader_workers <= 0 or not p.step_times_ns:
        return None
    own = _own_per_step(w, loading_ns)
    cpu = round(p.loader_cpu_ns / w.steps)
    return {
        "workers": p.loader_workers,
        "cpu_ns": cpu,
        "own_ns": own,
        "idle_host_wait_ns": max(cpu // p.loader_workers - own, 0),
    }


def _host_starved(w: Window, loading_ns: float, workers: dict[str, Any] | None) -> bool:
    """Whether the host's load may explain the step's wait for batches: the
    workers waited for a CPU at least the part of it a host with a core for
    each would not leave, and that part is no finding (all of the wait where
    their CPU time is unknown)."""
    if workers is None:
        return loading_ns <= w.loader_waited
    alone, own = workers["idle_host_wait_ns"], workers["own_ns"]
    return loading_ns - alone <= w.loader_waited and alone < w.t[
        "dataloader_bottleneck.min_share"
    ] * (own + alone)


def gpu_idle(w: Window) -> list[dict[str, Any]]:
    """Device idle ≥ min_idle of the window while the host is busy: launch-bound
    (warning; critical past critical_idle). GPU profiles only."""
    device_ns = w.tree.total("device_time_ns")
    if device_ns <= 0 or not w.gpu:
        return []
    wall = sum(w.profile.step_times_ns) or w.cpu[0]
    if wall <= 0:
        return []
    idle = 1 - min(device_ns, wall) / wall
    host_busy = min(w.cpu[0], wall) / wall
    if idle < w.t["gpu_idle.min_idle"] or host_busy < w.t["gpu_idle.min_host_busy"]:
        return []
    device = w.tree.inclusive("device_time_ns")
    phases = [n for n in w.tree.children(0) if w.kind(n) == "phase"] or [0]
    phase = max(phases, key=lambda p: w.cpu[p] - device[p])
    hot = w.hot_context(phase) if phase else 0
    return [
        finding(
            "gpu_idle",
            "critical" if idle >= w.t["gpu_idle.critical_idle"] else "warning",
            f"the GPU is idle {percent(idle)} of the window while the host is busy {percent(host_busy)}: "
            "launch-bound, most host time without device work in "
            f"{w.tree.node_frame(hot).label() if hot else 'the step'}",
            "reduce launches: torch.compile (mode='reduce-overhead' uses CUDA graphs), CUDA graphs for static "
            "shapes, larger batches, fewer host syncs and Python-side loops",
            w.tree,
            hot,
            {
                "idle": round(idle, 4),
                "host_busy": round(host_busy, 4),
                "device_ns": device_ns,
                "wall_ns": wall,
                "phase": w.tree.node_frame(phase).name if phase else None,
            },
            gain_ns=(wall - min(device_ns, wall)) / w.steps,
            gain_basis="the step's time per step with the device idle: an upper bound, the step shrunk to the "
            "device's own time",
        )
    ]
