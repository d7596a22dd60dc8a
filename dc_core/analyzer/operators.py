"""Operator patterns under one user context: ``dtype_conversion``,
``layout_conversion``, ``small_ops``, ``unfused_norm``, ``host_sync``.

Each groups top-level operators by the function (or line) that called them and
looks at what that scope does, so a finding names a place in the user's code.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from .base import Window, finding, ms, op_name, percent, weighted_median

# the last: JAX's (``x.astype``), one XLA convert
_CASTS = {
    "to",
    "_to_copy",
    "type",
    "type_as",
    "float",
    "half",
    "double",
    "bfloat16",
    "int",
    "long",
    "convert_element_type",
}
_DEVICE_WORDS = ("cuda", "cpu", "device", "mps", "xla")
_LAYOUT = {"contiguous"}
_RESHAPES = {"reshape", "flatten", "view_as_real"}
_COPIES = {"clone", "copy", "_reshape_copy", "_unsafe_view_copy"}
_SYNCS = {
    "item",
    "_local_scalar_dense",
    "nonzero",
    "is_nonzero",
    "tolist",
    "masked_select",
    "unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "cpu",
    "numpy",
    "synchronize",
    "equal",
    "bool_scalar",
    "int_scalar",
    "float_scalar",
    "index_scalar",
}
# The operators a hand-written norm is named by in its finding.
_NORM_PARTS = {"pow", "square", "mean", "var", "rsqrt", "sqrt", "mul", "sub", "div"}
_FUSED_PASSES = (
    4  # a fused norm's passes over its input: statistics and normalisation, forward and backward
)
_FUSED_NORMS = {
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "group_norm",
    "batch_norm",
}


def _names(w: Window, ops: list[int]) -> list[str]:
    return sorted({w.tree.node_frame(o).name for o in ops})


def _is_cast(w: Window, op: int) -> bool:
    frame = w.tree.node_frame(op)
    if op_name(frame) not in _CASTS:
        return False
    # a pure device move (``.to("cuda")``) is a transfer, not a dtype change
    detail = frame.detail.lower()
    return not (detail and any(word in detail for word in _DEVICE_WORDS) and "->" not in detail)


def dtype_conversion(w: Window) -> list[dict[str, Any]]:
    """Casts between dtypes taking ≥ min_share of a quiet step under one function (warning)."""
    casts = [op for op in w.top_ops if _is_cast(w, op)]
    out = []
    for ops in w.scopes(casts).values():
        time_ns = w.quiet_sum(ops)
        share = w.quiet_share(ops)
        if share < w.t["dtype_conversion.min_share"]:
            continue
        calls = sum(w.tree.value(o, "count") for o in ops)
        node = w.heaviest(ops)
        where = w.tree.node_frame(w.anchor(node)).label()
        severity, caveat = w.judge("warning", time_ns)
        out.append(
            finding(
                "dtype_conversion",
                severity,
                f"dtype conversions take {percent(share)} of a step ({ms(time_ns)}, "
                f"{calls / w.steps:.0f} per step) in {where}" + (f" ({caveat})" if caveat else ""),
                "keep arrays in one dtype across this code: cast inputs and parameters once, before the "
                "training loop (a mixed-precision policy casts them once per step at most), not inside the step"
                if w.profile.framework == "jax"
                else "keep tensors in one dtype across this code; for mixed precision use torch.autocast "
                "instead of manual .half()/.float() casts, and cast parameters once, not per step",
                w.tree,
                node,
                {
                    "share": round(share, 4),
                    "time_ns": int(time_ns),
                    "calls": calls,
                    "per_step": calls / w.steps,
                    "operators": _names(w, ops),
                    "metric": w.metric,
                    "per_step_ns": w.spread(ops),
                },
                gain_ns=w.mean_sum(ops),
                gain_basis=f"the casts under {where}, forward and backward (mean per step): "
                "all of their time, where the code can stay in one dtype",
            )
        )
    return out


def _is_layout_copy(w: Window, op: int) -> bool:
    name = op_name(w.tree.node_frame(op))
    if name in _LAYOUT:
        return True
    # a reshape of a non-contiguous tensor copies: it shows as a clone/copy under it
    return name in _RESHAPES and any(
        op_name(w.tree.node_frame(n)) in _COPIES for n in w.tree.preorder(op) if n != op
    )


def layout_conversion(w: Window) -> list[dict[str, Any]]:
    """``contiguous`` / copying reshapes taking ≥ min_share under one function (warning)."""
    copies = [op for op in w.top_ops if _is_layout_copy(w, op)]
    has_conv = any("conv" in op_name(w.tree.node_frame(o)) for o in w.top_ops)
    out = []
    scopes = w.scopes(w.top_ops)
    for key, ops in w.scopes(copies).items():
        time_ns = w.quiet_sum(ops)
        share = w.quiet_share(ops)
        if share < w.t["layout_conversion.min_share"]:
            continue
        transposes = sum(
            w.tree.value(o, "count")
            for o in scopes.get(key, ())
            if op_name(w.tree.node_frame(o)) in ("permute", "transpose", "t", "swapaxes", "movedim")
        )
        calls = sum(w.tree.value(o, "count") for o in ops)
        node = w.heaviest(ops)
        advice = (
            "use channels_last for the model and its inputs "
            "(model.to(memory_format=torch.channels_last)) so convolutions need no NCHW<->NHWC copies"
            if has_conv
            else "avoid materialising the transpose: keep the layout the next operator wants, "
            "use a matmul/einsum that takes the transposed view directly, or fuse with torch.compile"
        )
        where = w.tree.node_frame(w.anchor(node)).label()
        severity, caveat = w.judge("warning", time_ns)
        out.append(
            finding(
                "layout_conversion",
                severity,
                f"layout copies (contiguous/reshape) take {percent(share)} of a step ({ms(time_ns)}) "
                f"in {where}" + (f" ({caveat})" if caveat else ""),
                advice,
                w.tree,
                node,
                {
                    "share": round(share, 4),
                    "time_ns": int(time_ns),
                    "calls": calls,
                    "transposes": transposes,
                    "operators": _names(w, ops),
                    "metric": w.metric,
                    "per_step_ns": w.spread(ops),
                },
                gain_ns=w.mean_sum(ops),
                gain_basis=f"the layout copies under {where} (mean per step): all of their time, "
                "where the next operator takes the layout it is given",
            )
        )
    return out


def _work_per_call(w: Window, op: int) -> float:
    """What one call of an operator does: its device time where it has any (a
    kernel: its host time is the launch), else its host time."""
    calls = w.tree.value(op, "count") or 1
    device = w.device[op]
    return device / calls if device else w.per_call_ns(op)


def small_ops(w: Window) -> list[dict[str, Any]]:
    """Many short operators under one function (warning): ≥ min_per_step
    calls per step taking ≥ min_share of a quiet step's host time with the
    Python between them, each call small: a median call's work (device time
    where there is any, else host time) < max_median_us; in JAX, each an
    operation dispatched on its own from Python (eager: it has host time of
    its own), whatever its work, since under jit XLA runs them as one
    program. The optimizer is left to ``optimizer_unfused``."""
    jax = w.profile.framework == "jax"
    ops = [o for o in w.top_ops if w.phase(o) != "optimizer" and (not jax or w.cpu[o] > 0)]
    out = []
    for scope_ops in w.scopes(ops).values():
        calls = sum(w.tree.value(o, "count") for o in scope_ops)
        per_step = calls / w.steps
        if per_step < w.t["small_ops.min_per_step"]:
            continue
        weighed = w.per_call_ns if jax else partial(_work_per_call, w)
        med_ns = weighted_median([(weighed(o), w.tree.value(o, "count")) for o in scope_ops])
        # the ops and the Python of their lines between them: what a loop of them costs
        time_ns, mean_ns = w.with_lines(scope_ops, "cpu_time_ns")
        share = time_ns / max(w.quiet(0, "cpu_time_ns"), 1)
        if (not jax and med_ns >= w.t["small_ops.max_median_us"] * 1e3) or share < w.t[
            "small_ops.min_share"
        ]:
            continue
        anchor = w.anchor(w.heaviest(scope_ops))
        where = w.tree.node_frame(anchor).label() if anchor else "code outside any user frame"
        severity, caveat = w.judge("warning", time_ns)
        what = (
            f"{per_step:.0f} operations per step dispatched one by one (a median of {med_ns / 1e3:.1f} µs "
            f"of host time each)"
            if jax
            else f"{per_step:.0f} operators per step with a median of {med_ns / 1e3:.1f} µs"
        )
        out.append(
            finding(
                "small_ops",
                severity,
                f"{what} in {where} ({percent(share)} of a step's host time with the Python between them)"
                + (f" ({caveat})" if caveat else ""),
                "per-operation overhead dominates: replace the Python loop by one batched operation, or by "
                "jax.lax.scan / fori_loop, under jax.jit, so that XLA runs the loop as one program"
                if jax
                else "per-operator overhead dominates: replace the Python loop by one batched operator (index a "
                "stacked tensor, torch._foreach_* for per-tensor loops), or fuse with torch.compile "
                "(mode='reduce-overhead' on GPU)",
                w.tree,
                anchor or w.heaviest(scope_ops),
                {
                    "per_step": round(per_step, 1),
                    "calls": calls,
                    "median_us": round(med_ns / 1e3, 2),
                    "time_ns": int(time_ns),
                    "share": round(share, 4),
                    "operators": _names(w, scope_ops)[:10],
                },
                gain_ns=mean_ns - med_ns,
                gain_basis=f"the {per_step:.0f} operators per step under {where} and the Python between them "
                "(mean per step), less one call of their median: an upper bound, one batched call "
                "doing their work",
            )
        )
    return out


def unfused_norm(w: Window) -> list[dict[str, Any]]:
    """A normalisation written as an elementwise chain (pow/mean/rsqrt/mul) in
    one function (warning): one finding per function, over every place it is
    called from (a model's twelve LayerNorms are one fix)."""
    chains: dict[tuple, list[tuple[list[int], list[int], set[str]]]] = {}
    for ops in w.scopes(w.top_ops).values():
        # a model's forward: an update's arithmetic (a runtime's gradient
        # norm, under the user's ``engine.step()``) is no norm layer
        forward = [
            o
            for o in ops
            if not w.tree.node_frame(o).backward and w.phase(o) not in ("backward", "optimizer")
        ]
        names = {op_name(w.tree.node_frame(o)) for o in forward}
        inverse_root = "rsqrt" in names or ("sqrt" in names and names & {"div", "reciprocal"})
        reduce = names & {"mean", "var", "var_mean", "sum"}
        square = names & {"pow", "square", "mul"}
        if not (inverse_root or ("sqrt" in names and reduce)) or not reduce or not square:
            continue
        if names & _FUSED_NORMS:
            continue
        frame = w.tree.node_frame(w.anchor(w.heaviest(forward)))
        chains.setdefault((frame.kind, frame.name, frame.file), []).append((ops, forward, names))
    out = []
    for places in chains.values():
        ops = [o for chain, _, _ in places for o in chain]
        forward = [o for _, chain, _ in places for o in chain]
        names = set().union(*(n for _, _, n in places))
        time_ns = w.quiet_sum(ops)
        share = w.quiet_share(ops)
        if share < w.t["unfused_norm.min_share"]:
            continue
        kind = "LayerNorm" if "sub" in names or "var" in names or "var_mean" in names else "RMSNorm"
        anchor = w.anchor(w.heaviest(forward))
        fused = (
            "torch.nn.LayerNorm / F.layer_norm"
            if kind == "LayerNorm"
            else "torch.nn.RMSNorm / F.rms_norm"
        )
        where = w.tree.node_frame(anchor).label() if anchor else "?"
        per_place = max(len(f) for _, f, _ in places)
        # the chain's Python between its operators, and autograd's between
        # their backward functions, sit on its lines: they go with it
        chain_ns = w.with_lines(ops)[1]
        # A fused norm passes over the data about four times (statistics and
        # normalisation, forward and backward); the chain's forward operators
        # cost one pass each.
        fused_ns = _FUSED_PASSES * w.mean_sum(forward) / max(per_place, 1)
        called = f", called from {len(places)} places," if len(places) > 1 else ""
        severity, caveat = w.judge("warning", time_ns)
        out.append(
            finding(
                "unfused_norm",
                severity,
                f"a hand-written {kind} ({', '.join(sorted(names & _NORM_PARTS))}) "
                f"in {where}{called} takes {percent(share)} of a step ({ms(time_ns)}) in {per_place} separate operators"
                + (f" ({caveat})" if caveat else ""),
                f"use the fused {fused}, or torch.compile the block so the chain becomes one kernel",
                w.tree,
                anchor or w.heaviest(forward),
                {
                    "kind": kind,
                    "operators": sorted(names),
                    "ops": per_place,
                    "places": len(places),
                    "time_ns": int(time_ns),
                    "share": round(share, 4),
                    "metric": w.metric,
                    "per_step_ns": w.spread(ops),
                },
                gain_ns=chain_ns - fused_ns,
                gain_basis=f"the chain's {per_place} forward operators, their backward and the code between them in "
                f"{where} (mean per step"
                + (f", all {len(places)} places" if len(places) > 1 else "")
                + f"), less a fused norm's {_FUSED_PASSES} passes over the data, each at the cost of one "
                "of the chain's forward operators",
            )
        )
    return out


def host_sync(w: Window) -> list[dict[str, Any]]:
    """Synchronising calls (``.item()``, ``nonzero``, ``.cpu()``...) inside the step, per line.

    Warning where device activity was recorded (each sync stalls the launch
    queue) or when frequent or heavy; info otherwise. On a CPU-only run there
    is no device to wait for: only heavy ones, as info (a value read into
    Python per call, which a GPU would make a stall)."""
    # Syncs inside backward and the optimizer step come from the framework's own
    # code (e.g. a for-loop AdamW reads its step counter with .item()), not from
    # a line the user can change; optimizer_unfused covers the optimizer.
    syncs = [
        o
        for o in w.top_ops
        if op_name(w.tree.node_frame(o)) in _SYNCS and w.phase(o) not in ("backward", "optimizer")
    ]
    lines = w.scopes(w.top_ops, by_function=False)
    out = []
    for key, ops in w.scopes(syncs, by_function=False).items():
        calls = sum(w.tree.value(o, "count") for o in ops)
        per_step = calls / w.steps
        # what the line spends around its syncs: its operators and its own Python
        line_ops = lines.get(key, ops)
        line_ns, line_mean = w.with_lines(line_ops, "cpu_time_ns")
        share = line_ns / max(w.quiet(0, "cpu_time_ns"), 1)
        heavy = per_step > w.t["host_sync.warn_per_step"] or share >= w.t["host_sync.warn_share"]
        if w.cpu_only and not (heavy and share >= w.t["host_sync.warn_share"]):
            continue
        node = w.heaviest(ops)
        anchor = w.anchor(node)
        where = w.tree.node_frame(anchor).label() if anchor else "the step"
        what = (
            f"reads a tensor into Python {per_step:.1f}x per step at {where} ({ms(line_ns)} per step with "
            "the line's other work; no device here, on a GPU each read stalls the launch queue)"
            if w.cpu_only
            else f"synchronises host and device {per_step:.1f}x per step at {where}"
        )
        out.append(
            finding(
                "host_sync",
                "info"
                if w.cpu_only
                else w.judge("warning", line_ns)[0]
                if w.gpu or heavy
                else "info",
                f"{', '.join(_names(w, ops))} {what}",
                "keep values on the device (accumulate the loss as a tensor, read it once per step or every N "
                "steps), use masks or nonzero_static with fixed sizes instead of data-dependent shapes",
                w.tree,
                node,
                {
                    "operators": _names(w, ops),
                    "calls": calls,
                    "per_step": round(per_step, 2),
                    "time_ns": int(w.quiet_sum(ops, "cpu_time_ns")),
                    "line_ns": int(line_ns),
                    "share": round(share, 4),
                    "phase": w.phase(node),
                },
                gain_ns=line_mean * (1 - 1 / max(per_step, 1)),
                gain_basis=f"the time of {where}, which reads {per_step:.0f} values per step (mean per step), "
                "less one read: an upper bound, the values kept in one tensor and read once",
            )
        )
    return out
