"""Where the time goes, line by line: ``hotspot`` and ``backward_imbalance``.

Both weigh *top-level* operators (what user code called, with everything they
ran) against the user context above them; backward operators sit under the
forward context that created them, so one context key holds both directions.
A module's hotspot holds the layers it calls itself (see `_places`).
"""

from __future__ import annotations

from typing import Any

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
        if parent > 0 and w.kind(anchor) == "module" and not modules_below[anchor] and w.kind(parent) == "module":
            return parent
        return anchor

    return {op: place(w.anchor(op)) for op in w.top_ops}


def hotspot(w: Window) -> list[dict[str, Any]]:
    """The top lines (and modules) and operators by inclusive time (info)."""
    top, min_share = int(w.t["hotspot.top"]), w.t["hotspot.min_share"]
    out = []
    places = _places(w)
    lines: dict[tuple, list[int]] = {}
    for op in w.top_ops:
        if places[op]:
            lines.setdefault(w.context_key(places[op]), []).append(op)
    ranked = sorted(lines.values(), key=lambda ops: -sum(w.incl[o] for o in ops))
    for ops in ranked[:top]:
        time_ns = sum(w.incl[o] for o in ops)
        if time_ns / w.total < min_share:
            break
        phases = {phase: sum(w.incl[o] for o in group) for phase, group in _by_phase(w, ops).items()}
        per_anchor: dict[int, int] = {}
        for op in ops:  # shown where its operators spend most (the line's forward, backward or optimizer node)
            per_anchor[places[op]] = per_anchor.get(places[op], 0) + w.incl[op]
        node = max(per_anchor, key=per_anchor.__getitem__)
        label = w.tree.node_frame(node).label()
        names = sorted({w.tree.node_frame(o).name for o in ops}, key=lambda n: -sum(
            w.incl[o] for o in ops if w.tree.node_frame(o).name == n))
        split = ", ".join(f"{phase} {ms(phases[phase])}" for phase in ("forward", *_NOT_FORWARD) if phase in phases)
        out.append(finding(
            "hotspot", "info",
            f"{label}: {percent(time_ns / w.total)} of the window"
            + (f" ({split})" if set(phases) != {"forward"} else ""),
            f"the heaviest line; its main operators are {', '.join(names[:3])}",
            w.tree, node,
            {"kind": "line", "share": round(time_ns / w.total, 4), "time_ns": time_ns, "metric": w.metric,
             **{f"{phase}_ns": phases.get(phase, 0) for phase in ("forward", "backward")},
             **{f"{phase}_ns": phases[phase] for phase in _NOT_FORWARD[1:] if phase in phases},
             "operators": names[:5]},
        ))
    by_name: dict[str, list[int]] = {}
    for op in w.top_ops:
        by_name.setdefault(w.tree.node_frame(op).label(), []).append(op)
    ranked = sorted(by_name.items(), key=lambda item: -sum(w.incl[o] for o in item[1]))
    for name, ops in ranked[:top]:
        time_ns = sum(w.incl[o] for o in ops)
        if time_ns / w.total < min_share:
            break
        calls = sum(w.tree.value(o, "count") for o in ops)
        node = w.heaviest(ops)
        out.append(finding(
            "hotspot", "info",
            f"operator {name}: {percent(time_ns / w.total)} of the window in {calls} calls from {len(ops)} places",
            "the heaviest operator; its heaviest call site is shown",
            w.tree, node,
            {"kind": "operator", "operator": name, "share": round(time_ns / w.total, 4), "time_ns": time_ns,
             "metric": w.metric, "calls": calls, "places": len(ops)},
        ))
    return out


_BACKWARD_ADVICE = {
    "cumprod": "cumprod's backward is slow (quadratic where the input holds zeros); for positive inputs use "
    "torch.exp(torch.cumsum(torch.log(x), dim)), or write a custom autograd.Function",
    "cumsum": "check whether a reversed cumsum or a matrix formulation avoids the slow backward",
}
for _name in ("index", "index_put", "index_select", "gather", "scatter", "embedding", "take"):
    _BACKWARD_ADVICE[_name] = (
        "indexing backward accumulates duplicate indices serially; use index_add_/scatter_add_ on sorted, "
        "unique indices, a one-hot matmul for small vocabularies, or nn.EmbeddingBag"
    )


_GEMMS = ("linear", "mm", "addmm", "bmm", "baddbmm", "matmul", "einsum", "conv1d", "conv2d", "conv3d",
          "convolution", "conv_transpose2d", "scaled_dot_product_attention",
          "dot_general", "conv_general_dilated")  # JAX's primitives


def _expected_ratio(w: Window, forward: list[int], backward: list[int], name: str) -> float:
    """How much more a backward costs by nature: its FLOP ratio where both
    directions have FLOPs (a GEMM's backward is two GEMMs), else 2 for known
    GEMM-like operators, else 1. Timing noise on a busy host easily pushes a
    linear layer's 2x past 3x; its FLOPs say that is normal."""
    flops = w.tree.inclusive("flops") if "flops" in w.tree.excl else None
    if flops is not None:
        fwd, bwd = sum(flops[o] for o in forward), sum(flops[o] for o in backward)
        if fwd > 0 and bwd > 0:
            return max(bwd / fwd, 1.0)
    return 2.0 if name in _GEMMS else 1.0


def backward_imbalance(w: Window) -> list[dict[str, Any]]:
    """A line whose backward operators take ≥ ratio × its forward ones and a
    noticeable share of the window (warning)."""
    ratio, min_share = w.t["backward_imbalance.ratio"], w.t["backward_imbalance.min_share"]
    out = []
    for ops in w.scopes(w.top_ops, by_function=False).values():
        phases = _by_phase(w, ops)
        forward, backward = phases.get("forward", []), phases.get("backward", [])
        fwd = sum(w.incl[o] for o in forward)
        bwd = sum(w.incl[o] for o in backward)
        if not forward or not backward or bwd / w.total < min_share:
            continue
        main = w.heaviest(forward)
        name = w.tree.node_frame(main).name
        expected = _expected_ratio(w, forward, backward, op_name(w.tree.node_frame(main)))
        if bwd < ratio * expected * fwd:
            continue
        advice = _BACKWARD_ADVICE.get(op_name(w.tree.node_frame(main)))
        out.append(finding(
            "backward_imbalance", "warning",
            f"{name} costs {bwd / max(fwd, 1):.1f}x more in backward ({ms(bwd)}) than forward ({ms(fwd)}), "
            f"{percent(bwd / w.total)} of the window",
            advice or f"check the backward formula of {name}: an equivalent forward, or "
            + ("a jax.custom_vjp rule" if w.profile.framework == "jax" else "a custom autograd.Function")
            + ", may have a much cheaper backward",
            w.tree, w.heaviest(backward),
            {"operator": name, "forward_ns": fwd, "backward_ns": bwd, "ratio": round(bwd / max(fwd, 1), 2),
             "expected_ratio": round(expected, 2),
             "share": round(bwd / w.total, 4), "metric": w.metric,
             "backward_operators": sorted({w.tree.node_frame(o).name for o in backward})},
        ))
    return out
