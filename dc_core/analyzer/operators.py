"""Operator patterns under one user context: ``dtype_conversion``,
``layout_conversion``, ``small_ops``, ``unfused_norm``, ``host_sync``.

Each groups top-level operators by the function (or line) that called them and
looks at what that scope does, so a finding names a place in the user's code.
"""

from __future__ import annotations

from typing import Any

from .base import Window, finding, ms, op_name, percent, weighted_median

_CASTS = {"to", "_to_copy", "type", "type_as", "float", "half", "double", "bfloat16", "int", "long"}
_DEVICE_WORDS = ("cuda", "cpu", "device", "mps", "xla")
_LAYOUT = {"contiguous"}
_RESHAPES = {"reshape", "flatten", "view_as_real"}
_COPIES = {"clone", "copy", "_reshape_copy", "_unsafe_view_copy"}
_SYNCS = {
    "item", "_local_scalar_dense", "nonzero", "is_nonzero", "tolist", "masked_select", "unique", "_unique2",
    "unique_dim", "unique_consecutive", "cpu", "numpy", "synchronize", "equal",
    "bool_scalar", "int_scalar", "float_scalar", "index_scalar",
}
_FUSED_NORMS = {"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "batch_norm"}


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
    """Casts between dtypes taking ≥ min_share of the window under one function (warning)."""
    casts = [op for op in w.top_ops if _is_cast(w, op)]
    out = []
    for ops in w.scopes(casts).values():
        time_ns = sum(w.incl[o] for o in ops)
        share = time_ns / w.total
        if share < w.t["dtype_conversion.min_share"]:
            continue
        calls = sum(w.tree.value(o, "count") for o in ops)
        node = w.heaviest(ops)
        out.append(finding(
            "dtype_conversion", "warning",
            f"dtype conversions take {percent(share)} of the window ({ms(time_ns)}, "
            f"{calls / w.steps:.0f} per step) in {w.tree.node_frame(w.anchor(node)).label()}",
            "keep tensors in one dtype across this code; for mixed precision use torch.autocast "
            "instead of manual .half()/.float() casts, and cast parameters once, not per step",
            w.tree, node,
            {"share": round(share, 4), "time_ns": time_ns, "calls": calls, "per_step": calls / w.steps,
             "operators": _names(w, ops), "metric": w.metric},
        ))
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
        time_ns = sum(w.incl[o] for o in ops)
        share = time_ns / w.total
        if share < w.t["layout_conversion.min_share"]:
            continue
        transposes = sum(
            w.tree.value(o, "count") for o in scopes.get(key, ())
            if op_name(w.tree.node_frame(o)) in ("permute", "transpose", "t", "swapaxes", "movedim")
        )
        calls = sum(w.tree.value(o, "count") for o in ops)
        node = w.heaviest(ops)
        advice = ("use channels_last for the model and its inputs "
                  "(model.to(memory_format=torch.channels_last)) so convolutions need no NCHW<->NHWC copies"
                  if has_conv else
                  "avoid materialising the transpose: keep the layout the next operator wants, "
                  "use a matmul/einsum that takes the transposed view directly, or fuse with torch.compile")
        out.append(finding(
            "layout_conversion", "warning",
            f"layout copies (contiguous/reshape) take {percent(share)} of the window ({ms(time_ns)}) "
            f"in {w.tree.node_frame(w.anchor(node)).label()}",
            advice, w.tree, node,
            {"share": round(share, 4), "time_ns": time_ns, "calls": calls, "transposes": transposes,
             "operators": _names(w, ops), "metric": w.metric},
        ))
    return out


def small_ops(w: Window) -> list[dict[str, Any]]:
    """Many short operators under one function: median < max_median_us and
    ≥ min_per_step calls per step (warning). The optimizer is left to ``optimizer_unfused``."""
    ops = [o for o in w.top_ops if w.phase(o) != "optimizer"]
    out = []
    for scope_ops in w.scopes(ops).values():
        calls = sum(w.tree.value(o, "count") for o in scope_ops)
        per_step = calls / w.steps
        if per_step < w.t["small_ops.min_per_step"]:
            continue
        med_ns = weighted_median([(w.per_call_ns(o), w.tree.value(o, "count")) for o in scope_ops])
        time_ns = sum(w.cpu[o] for o in scope_ops)
        share = time_ns / w.host_total
        if med_ns >= w.t["small_ops.max_median_us"] * 1e3 or share < w.t["small_ops.min_share"]:
            continue
        anchor = w.anchor(w.heaviest(scope_ops))
        out.append(finding(
            "small_ops", "warning",
            f"{per_step:.0f} operators per step with a median of {med_ns / 1e3:.1f} µs in "
            f"{w.tree.node_frame(anchor).label() if anchor else 'code outside any user frame'} "
            f"({percent(share)} of host time)",
            "per-operator overhead dominates: fuse with torch.compile (mode='reduce-overhead' on GPU), "
            "use torch._foreach_* for per-tensor loops, or vectorise the Python loop",
            w.tree, anchor or w.heaviest(scope_ops),
            {"per_step": round(per_step, 1), "calls": calls, "median_us": round(med_ns / 1e3, 2),
             "time_ns": time_ns, "share": round(share, 4), "operators": _names(w, scope_ops)[:10]},
        ))
    return out


def unfused_norm(w: Window) -> list[dict[str, Any]]:
    """A normalisation written as an elementwise chain (pow/mean/rsqrt/mul) in one function (warning)."""
    out = []
    for ops in w.scopes(w.top_ops).values():
        forward = [o for o in ops if not w.tree.node_frame(o).backward and w.phase(o) != "backward"]
        names = {op_name(w.tree.node_frame(o)) for o in forward}
        inverse_root = "rsqrt" in names or ("sqrt" in names and names & {"div", "reciprocal"})
        reduce = names & {"mean", "var", "var_mean", "sum"}
        square = names & {"pow", "square", "mul"}
        if not (inverse_root or ("sqrt" in names and reduce)) or not reduce or not square:
            continue
        if names & _FUSED_NORMS:
            continue
        time_ns = sum(w.incl[o] for o in ops)
        share = time_ns / w.total
        if share < w.t["unfused_norm.min_share"]:
            continue
        kind = "LayerNorm" if "sub" in names or "var" in names or "var_mean" in names else "RMSNorm"
        anchor = w.anchor(w.heaviest(forward))
        fused = "torch.nn.LayerNorm / F.layer_norm" if kind == "LayerNorm" else "torch.nn.RMSNorm / F.rms_norm"
        out.append(finding(
            "unfused_norm", "warning",
            f"a hand-written {kind} ({', '.join(sorted(names & {'pow', 'square', 'mean', 'var', 'rsqrt', 'sqrt', 'mul', 'sub', 'div'}))}) "
            f"in {w.tree.node_frame(anchor).label() if anchor else '?'} takes {percent(share)} of the window "
            f"in {len(forward)} separate operators",
            f"use the fused {fused}, or torch.compile the block so the chain becomes one kernel",
            w.tree, anchor or w.heaviest(forward),
            {"kind": kind, "operators": sorted(names), "ops": len(forward), "time_ns": time_ns,
             "share": round(share, 4), "metric": w.metric},
        ))
    return out


def host_sync(w: Window) -> list[dict[str, Any]]:
    """Synchronising calls (``.item()``, ``nonzero``, ``.cpu()``...) inside the step, per line.

    None on a CPU-only run: there is no device to wait for, the call is just
    an operator. Warning where device activity was recorded (each sync stalls
    the launch queue) or when frequent or heavy; info otherwise."""
    if w.cpu_only:
        return []
    # Syncs inside backward and the optimizer step come from the framework's own
    # code (e.g. a for-loop AdamW reads its step counter with .item()), not from
    # a line the user can change; optimizer_unfused covers the optimizer.
    syncs = [o for o in w.top_ops
             if op_name(w.tree.node_frame(o)) in _SYNCS and w.phase(o) not in ("backward", "optimizer")]
    out = []
    for ops in w.scopes(syncs, by_function=False).values():
        calls = sum(w.tree.value(o, "count") for o in ops)
        per_step = calls / w.steps
        time_ns = sum(w.cpu[o] for o in ops)
        share = time_ns / w.host_total
        heavy = per_step > w.t["host_sync.warn_per_step"] or share >= w.t["host_sync.warn_share"]
        node = w.heaviest(ops)
        anchor = w.anchor(node)
        where = w.tree.node_frame(anchor).label() if anchor else "the step"
        out.append(finding(
            "host_sync", "warning" if w.gpu or heavy else "info",
            f"{', '.join(_names(w, ops))} synchronises host and device {per_step:.1f}x per step at {where}",
            "keep values on the device (accumulate the loss as a tensor, log every N steps), use masks or "
            "nonzero_static with fixed sizes instead of data-dependent shapes",
            w.tree, node,
            {"operators": _names(w, ops), "calls": calls, "per_step": round(per_step, 2), "time_ns": time_ns,
             "share": round(share, 4), "phase": w.phase(node)},
        ))
    return out
