"""``exposed_communication``: a module whose parameter all-gathers the step
waits for, with what hiding them would save and how to hide them.

Reads communication by module (`dc_core.model.comm.by_module`: each
collective under the module whose parameters it moves, its
``exposed_comm_ns`` the time the issuing thread waited for it). The saving is
the module's exposed all-gather time per step: what a prefetch that overlaps
it with other work, or keeping the parameters gathered from forward to
backward, takes off the step (an upper bound: the work to hide a gather
behind must be there). Its reduce-scatters' exposed time is said but not
counted: the settings that hide a gather do not touch them.
"""

from __future__ import annotations

from typing import Any

from ..model.comm import ModuleComm, by_module
from .base import Window, finding, ms, percent, size

MIB = 1 << 20


def exposed_communication(w: Window) -> list[dict[str, Any]]:
    rows = by_module(w.tree, w.metric)
    if not rows:
        return []
    step = max(w.host_total / w.steps, 1)
    found = []
    for row in rows:
        gathers = _part(row.exposed_by, "all-gather") / w.steps
        if gathers < w.t["exposed_communication.min_share"] * step:
            continue
        found.append(_finding(w, row, gathers, step))
    found.sort(key=lambda f: -f["gain_ns"])
    return found[: int(w.t["exposed_communication.top"])]


def _part(by: dict[str, int], operation: str, phase: str | None = None) -> int:
    """The sum of ``by``'s ``"<phase> <operation>"`` entries (any phase: None)."""
    return sum(
        v
        for k, v in by.items()
        if k.endswith(f" {operation}") and (phase is None or k.startswith(f"{phase} "))
    )


def _finding(w: Window, row: ModuleComm, gathers: float, step: float) -> dict[str, Any]:
    steps = w.steps
    forward = _part(row.exposed_by, "all-gather", "forward") / steps
    backward = gathers - forward
    moved = _part(row.bytes_by, "all-gather") / steps
    calls = sum(w.tree.value(c, "count") for c in row.collectives if "gather" in _name(w, c)) / max(
        steps, 1
    )
    reduces = _part(row.exposed_by, "reduce-scatter") / steps
    fqn = row.module.name
    severity, caveat = w.judge("warning", gathers)
    split = ", ".join(
        f"{label} {ms(v)}" for label, v in (("forward", forward), ("backward", backward)) if v
    )
    message = (
        f"the step waits {ms(gathers)} per step ({percent(gathers / step)}) for `{fqn}`'s "
        f"parameter all-gathers ({split}; {size(moved)} a step)"
        + (f", and {ms(reduces)} for its gradients' reduce-scatters" if reduces >= 1e5 else "")
        + (f" ({caveat})" if caveat else "")
    )
    return finding(
        "exposed_communication",
        severity,
        message,
        _advice(w, fqn, forward, backward, moved, calls, reduces),
        w.tree,
        row.nodes[0],
        {
            "exposed_all_gather_ns": int(gathers),
            "forward_ns": int(forward),
            "backward_ns": int(backward),
            "reduce_scatter_ns": int(reduces),
            "all_gather_bytes": int(moved),
            "comm_ns": int(row.comm_ns / steps),
            "compute_ns": int(row.compute_ns / steps),
            "step_ns": int(step),
        },
        gain_ns=gathers,
        gain_basis=(
            f"{fqn}'s all-gathers' exposed time per step (the call and the waits on it), "
            "all of it hidden behind other work: an upper bound, that work must be there"
        ),
    )


def _name(w: Window, node: int) -> str:
    return w.tree.node_frame(node).name.lower()


def _advice(
    w: Window, fqn: str, forward: float, backward: float, moved: float, calls: float, reduces: float
) -> str:
    out = []
    if w.cpu_only:
        # on gloo a prefetch is the issuing thread gathering unless the
        # groups unshard asynchronously (the pre-forward then waits on it)
        out.append(
            "FSDP2's prefetches run synchronously on gloo: let its groups unshard "
            "asynchronously (`model._set_unshard_async_op(True)`) so a prefetch overlaps work"
        )
    if forward:
        out.append(
            f"prefetch `{fqn}` during the forward of the module before it "
            f"(`previous.set_modules_to_forward_prefetch([{fqn}])`)"
        )
    if backward:
        out.append(
            f"keep its parameters gathered from forward to backward "
            f"(`fully_shard({fqn}, reshard_after_forward=False)`: no backward all-gather, "
            f"{size(moved / max(calls, 1))} more held until its backward), or prefetch it "
            f"during the backward of the module after it "
            f"(`following.set_modules_to_backward_prefetch([{fqn}])`)"
        )
    if calls and moved / calls < MIB:
        out.append(
            f"each gather moves {size(moved / calls)}: at that size a gather's latency, not its "
            f"bytes, is the cost; shard at a coarser granularity (`fully_shard` the parent, not "
            f"each child) so fewer gathers carry the same bytes"
        )
    if reduces >= 1e5 and w.cpu_only:
        out.append("gloo runs the gradients' reduce-scatter synchronously: nothing hides it here")
    return "; ".join(out)
