"""Where the time goes, line by line: ``hotspot`` and ``backward_imbalance``.

Both weigh *top-level* operators (what user code called, with everything they
ran) against the user context above them; backward operators sit under the
forward context that created them, so one context key holds both directions.
A module's hotspot holds the layers it calls itself (see `_places`).
"""

from __future__ import annotations

from typing import Any

from ..model.comm import RUNTIME_OPERATORS
from ..model.opnames import is_collective
from .base import Window, finding, ms, op_name, percent

_NOT_FORWARD = ("backward", "optimizer", "dataloader")


def _by_phase(w: Window, ops: list[int]) -> dict[str, list[int]]:
    """Operators by the phase they ran in, backward-flagged ones in backward.
    ``forward`` holds every phase of the model's own compute (forward, other)."""
    out: dict[str, list[int]] = {}
    for op in ops:
        phase = "backward" if w.tree.node_frame(op).backward else w.phase(op)
        out.setdefault(phase if phase in _NOT_FORWARD else "forward", []).append(op)
    return out


def _places(w: Window) -> dict[int, int]:
    """Per top-level operator, the place ``hotspot`` bills it to: its anchor,
    except that a module with no module below it, nested right under another
    module (called by that module's own code, no line of the user's between:
    attention's ``query``, ``key``, ``value``, ``out``), counts as that module,
    so that a module's share is what the tree shows for it, its layers in."""
    tree = w.tree
    modules_below = [False] * len(tree)
    for node in reversed(tree.topdown()):
        parent = tree.parent[node]
        if node and parent > 0 and (modules_below[node] or w.kind(node) == "module"):
            modules_below[parent] = True

    def place(anchor: int) -> int:
        parent = tree.parent[anchor] if anchor else 0
        if (
            parent > 0
            and w.kind(anchor) == "module"
            and not modules_below[anchor]
            and w.kind(parent) == "module"
        ):
            return parent
        return anchor

    return {op: place(w.anchor(op)) for op in w.top_ops}


def hotspot(w: Window) -> list[dict[str, Any]]:
    """Where the step goes: one summary of the top lines (modules) and
    operators by time per step (info; a map of the tree, not a fix)."""
    top, min_share = int(w.t["hotspot.top"]), w.t["hotspot.min_share"]
    places = _places(w)
    lines: dict[tuple, list[int]] = {}
    for op in w.top_ops:
        if places[op]:
            lines.setdefault(w.context_key(places[op]), []).append(op)
    places_out = []
    for ops in sorted(lines.values(), key=lambda ops: -sum(w.incl[o] for o in ops))[:top]:
        time_ns = sum(w.incl[o] for o in ops)
        if time_ns / w.total < min_share:
            break
        phases = {
            phase: sum(w.incl[o] for o in group) for phase, group in _by_phase(w, ops).items()
        }
        per_anchor: dict[int, int] = {}
        # shown where its operators spend most (the line's forward, backward or optimizer node)
        for op in ops:
            per_anchor[places[op]] = per_anchor.get(places[op], 0) + w.incl[op]
        node = max(per_anchor, key=per_anchor.__getitem__)
        names = sorted(
            {w.tree.node_frame(o).name for o in ops},
            key=lambda n: -sum(w.incl[o] for o in ops if w.tree.node_frame(o).name == n),
        )
        places_out.append(
            {
                "label": w.tree.node_frame(node).label(),
                "node": node,
                "share": round(time_ns / w.total, 4),
                "time_ns": time_ns,
                "per_step_ns": int(time_ns / w.steps),  # the window's, and per step
                **{f"{phase}_ns": phases.get(phase, 0) for phase in ("forward", *_NOT_FORWARD)},
                "operators": names[:5],
            }
        )
    by_name: dict[str, list[int]] = {}
    for op in w.top_ops:
        by_name.setdefault(w.tree.node_frame(op).label(), []).append(op)
    operators = []
    for name, ops in sorted(by_name.items(), key=lambda item: -sum(w.incl[o] for o in item[1]))[
        :top
    ]:
        time_ns = sum(w.incl[o] for o in ops)
        if time_ns / w.total < min_share:
            break
        operators.append(
            {
                "operator": name,
                "share": round(time_ns / w.total, 4),
                "time_ns": time_ns,
                "per_step_ns": int(time_ns / w.steps),
                "calls": sum(w.tree.value(o, "count") for o in ops),
                "places": len(ops),
                "node": w.heaviest(ops),
            }
        )
    if not places_out and not operators:
        return []
    text = "; ".join(
        filter(
            None,
            [
                ", ".join(f"{p['label']} {percent(p['share'])}" for p in places_out),
                ", ".join(f"operator {o['operator']} {percent(o['share'])}" for o in operators),
            ],
        )
    )
    return [
        finding(
            "hotspot",
            "info",
            f"where the step goes: {text}",
            "start with the first of these when looking for time; the findings above say what to change",
            w.tree,
            places_out[0]["node"] if places_out else operators[0]["node"],
            {"lines": places_out, "operators": operators, "metric": w.metric},
            gain_ns=None,
            gain_basis="a summary of where the time is, not a fix",
        )
    ]


_BACKWARD_ADVICE = {
    "cumprod": "cumprod's backward is slow (quadratic where the input holds zeros); for positive inputs use "
    "torch.exp(torch.cumsum(torch.log(x), dim)), or write a custom autograd.Function",
    "cumsum": "check whether a reversed cumsum or a matrix formulation avoids the slow backward",
}
_GEMM_ADVICE = (
    "a GEMM's backward is two GEMMs of its forward's size, writing a gradient as large as its weight: time "
    "beyond that goes to copies around them (an input made contiguous, a dtype cast); a comprehensive "
    "window shows the operators under it"
)
_SLOW_BACKWARD = ("index", "index_put", "index_select", "gather", "scatter", "embedding", "take")
for _name in _SLOW_BACKWARD:
    _BACKWARD_ADVICE[_name] = (
        "indexing backward accumulates duplicate indices serially; use index_add_/scatter_add_ on sorted, "
        "unique indices, a one-hot matmul for small vocabularies, or nn.EmbeddingBag"
    )


# JAX's primitives
_GEMMS = (
    "linear",
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "einsum",
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "conv_transpose2d",
    "scaled_dot_product_attention",
    "dot_general",
    "conv_general_dilated",
)

#: How much more than its forward an operator family's backward costs by
#: nature, where FLOPs do not say: a GEMM's backward is two GEMMs, a pooling's
#: or a loss's scatters its gradient through saved indices or a softmax, a
#: normalisation's recomputes its statistics, a reduction's writes the whole
#: input's size where its forward wrote one value per row (fresh memory:
#: page faults). Anything else: 1.
_NORMAL_RATIO = {
    **dict.fromkeys(_GEMMS, 2.0),
    **dict.fromkeys(
        (
            "max_pool1d",
            "max_pool2d",
            "max_pool3d",
            "max_pool2d_with_indices",
            "avg_pool2d",
            "adaptive_avg_pool2d",
            "adaptive_max_pool2d",
            "fractional_max_pool2d",
        ),
        3.0,
    ),
    **dict.fromkeys(
        (
            "cross_entropy_loss",
            "nll_loss",
            "nll_loss_nd",
            "nll_loss2d",
            "log_softmax",
            "_log_softmax",
            "softmax",
            "_softmax",
            "mse_loss",
            "binary_cross_entropy",
            "binary_cross_entropy_with_logits",
            "kl_div",
            "smooth_l1_loss",
            "huber_loss",
            "ctc_loss",
        ),
        3.0,
    ),
    **dict.fromkeys(
        (
            "layer_norm",
            "native_layer_norm",
            "batch_norm",
            "native_batch_norm",
            "group_norm",
            "native_group_norm",
            "rms_norm",
            "_fused_rms_norm",
            "instance_norm",
        ),
        3.0,
    ),
    **dict.fromkeys(
        (
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "norm",
            "linalg_vector_norm",
            "var",
            "std",
            "var_mean",
            "std_mean",
            "logsumexp",
            "cumsum",
            "reduce_sum",
            "reduce_max",
        ),
        3.0,
    ),
    **dict.fromkeys(
        (
            "gelu",
            "silu",
            "tanh",
            "sigmoid",
            "softplus",
            "elu",
            "mish",
            "hardswish",
            "dropout",
            "native_dropout",
            "leaky_relu",
        ),
        2.0,
    ),
    # elementwise arithmetic: a gradient per input, each its own pass and fresh tensor
    **dict.fromkeys(
        (
            "add",
            "sub",
            "mul",
            "div",
            "pow",
            "square",
            "sqrt",
            "rsqrt",
            "exp",
            "log",
            "abs",
            "clamp",
            "where",
            "reciprocal",
            "neg",
            "maximum",
            "minimum",
            "addcmul",
            "addcdiv",
            "lerp",
        ),
        3.0,
    ),
    # known slow backward formulas: judged against 1x so their advice is given
    **dict.fromkeys((*_SLOW_BACKWARD, "cumprod"), 1.0),
}
_OTHER_RATIO = 2.0  # an operator of no family here: its backward is a few of its forward's passes

#: Communication and its machinery: a gradient all-reduce, FSDP's all-gather
#: and reduce-scatter copies, DDP's reducer's own work. Their time in backward is waiting for ranks, not
#: a backward formula.
_COMMUNICATION = (
    "all_reduce",
    "allreduce",
    "all-reduce",
    "all_gather",
    "allgather",
    "all-gather",
    "reduce_scatter",
    "reduce-scatter",
    "psum",
    "pmean",
    "all_to_all",
    "all-to-all",
    "ppermute",
    "collective",
    "c10d::",
    "nccl",
    "gloo",
    "fsdp",
    "record_param_comms",
    "broadcast_",
    *RUNTIME_OPERATORS,
)


def _communicates(w: Window) -> list[bool]:
    """Per node: whether it or a node below it is communication (one bottom-up pass)."""
    tree, out = w.tree, [False] * len(w.tree)
    for node in range(len(tree) - 1, 0, -1):
        frame = tree.node_frame(node)
        if not out[node] and frame.kind in ("operator", "kernel"):
            name = frame.name.lower()
            out[node] = is_collective(frame.kind, frame.name) or any(
                word in name for word in _COMMUNICATION
            )
        if out[node]:
            out[tree.parent[node]] = True
    return out


def _multiple(w: Window, metric: str, forward: list[int], backward: list[int]) -> float | None:
    """Backward over forward in ``metric`` (at least 1), or None where either side has none."""
    if metric not in w.tree.excl:
        return None
    column = w.tree.inclusive(metric)
    fwd, bwd = sum(column[o] for o in forward), sum(column[o] for o in backward)
    return max(bwd / fwd, 1.0) if fwd > 0 and bwd > 0 else None


def _expected_ratio(w: Window, forward: list[int], backward: list[int], name: str) -> float | None:
    """How much more a backward costs by nature: its FLOP ratio where both
    directions have FLOPs, else its family's (`_NORMAL_RATIO`, `_OTHER_RATIO`).

    A GEMM's backward also writes a gradient as large as its weight, whatever
    the batch: with few rows a step that write, not its FLOPs, is its cost (on
    a CPU a fresh 64 MiB gradient page-faults every step, 7x the forward of a
    Linear(4096, 4096) over 4 rows). No fixed multiple holds for every batch,
    so a GEMM is judged by the larger of its FLOP and written-bytes ratios, and
    not at all (None) where the window lacks either (a lightweight window, the
    Python capture path's ATen operators, a JAX trace)."""
    flops = _multiple(w, "flops", forward, backward)
    if name in _GEMMS:
        written = _multiple(w, "alloc_bytes", forward, backward)
        return None if flops is None or written is None else max(flops, written)
    return flops if flops is not None else _NORMAL_RATIO.get(name, _OTHER_RATIO)


def backward_imbalance(w: Window) -> list[dict[str, Any]]:
    """A line whose backward operators take ≥ ratio × their normal multiple of
    its forward ones (`_expected_ratio`) and ≥ min_share of a step, both in the
    quietest step (warning). Communication is left out of both sides."""
    ratio, min_share = w.t["backward_imbalance.ratio"], w.t["backward_imbalance.min_share"]
    comm = _communicates(w)
    out = []
    for ops in w.scopes(w.top_ops, by_function=False).values():
        phases = _by_phase(w, ops)
        forward = [o for o in phases.get("forward", []) if not comm[o]]
        backward = [o for o in phases.get("backward", []) if not comm[o]]
        if not forward or not backward:
            continue
        fwd, bwd = w.quiet_sum(forward), w.quiet_sum(backward)
        if bwd / max(w.quiet(0), 1) < min_share:
            continue
        main = max(forward, key=lambda o: (w.quiet(o), w.incl[o]))
        name, family = w.tree.node_frame(main).name, op_name(w.tree.node_frame(main))
        expected = _expected_ratio(w, forward, backward, family)
        if expected is None or bwd < ratio * expected * fwd:
            continue
        heavy = max(backward, key=lambda o: (w.quiet(o), w.incl[o]))
        heavy_name = w.tree.node_frame(heavy).label()
        where = w.tree.node_frame(w.anchor(main)).label() if w.anchor(main) else name
        jax = w.profile.framework == "jax"
        advice = _GEMM_ADVICE if family in _GEMMS else _BACKWARD_ADVICE.get(family)
        severity, caveat = w.judge("warning", bwd - expected * fwd)
        out.append(
            finding(
                "backward_imbalance",
                severity,
                f"the backward of {where} takes {bwd / max(fwd, 1):.1f}x its forward ({ms(bwd)} against {ms(fwd)} "
                f"per step; {expected:g}x is normal for {name}), mostly in {heavy_name}"
                + (f" ({caveat})" if caveat else ""),
                advice
                or f"check the backward formula of {name}: an equivalent forward, or "
                + ("a jax.custom_vjp rule" if jax else "a custom autograd.Function")
                + ", may have a much cheaper backward",
                w.tree,
                heavy,
                {
                    "operator": name,
                    "backward_node": heavy_name,
                    "forward_ns": int(fwd),
                    "backward_ns": int(bwd),
                    "ratio": round(bwd / max(fwd, 1), 2),
                    "expected_ratio": round(expected, 2),
                    "share": round(bwd / max(w.quiet(0), 1), 4),
                    "metric": w.metric,
                    "backward_per_step": w.spread(backward),
                    "backward_operators": sorted({w.tree.node_frame(o).name for o in backward}),
                },
                gain_ns=w.mean_sum(backward) - expected * w.mean_sum(forward),
                gain_basis=f"the backward operators of {where} (mean per step) above {expected:g}x its forward "
                "operators: an upper bound, what a backward of the normal multiple would save"
                + (
                    ""
                    if _multiple(w, "flops", forward, backward)
                    else f"; the window has no FLOPs (a lightweight window), so "
                    f"{expected:g}x is {family}'s family's multiple"
                ),
            )
        )
    return out
