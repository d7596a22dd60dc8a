"""``exposed_communication``: a module whose parameter all-gathers the step
waits for, with what hiding them would save and how to hide them; and the
wait for DDP's gradient all-reduce at the end of backward, at the module
whose gradients came last.

Reads communication by module (`dc_core.model.comm.by_module`: each
collective under the module whose parameters it moves, its
``exposed_comm_ns`` the time the issuing thread waited for it). The saving is
the module's exposed all-gather time per step: what a prefetch that overlaps
it with other work, or keeping the parameters gathered from forward to
backward, takes off the step (an upper bound: the work to hide a gather
behind must be there). Its reduce-scatters' exposed time is said but not
counted: the settings that hide a gather do not touch them.

DDP's reducer waits for its buckets' all-reduces when the backward pass
ends (`dc_core.model.comm.END_OF_BACKWARD`): what is still on the wire then
is the step's exposed all-reduce, what launching the buckets sooner, or not
at all on accumulation steps, would take off the step (again an upper bound).
"""

from __future__ import annotations

from typing import Any

from ..model.comm import (
    END_OF_BACKWARD,
    WAITED,
    WAITS,
    ModuleComm,
    by_module,
    ddp_settings,
    operation,
)
from .base import Window, finding, ms, percent, size
from .sharding_advice import MIB, fsdp1_advice, fsdp2_advice, zero_advice

#: What `ModuleComm.sharded_by` says of a unit of FSDP1 (``FullyShardedDataParallel``).
FSDP1 = "FullyShardedDataParallel"


def exposed_communication(w: Window) -> list[dict[str, Any]]:
    rows = by_module(w.tree, w.metric)
    if not rows:
        return []
    step = max(w.host_total / w.steps, 1)
    found = []
    least = w.t["exposed_communication.min_share"] * step
    for row in rows:
        gathers = _part(row.exposed_by, "all-gather") / w.steps
        if gathers >= least:
            found.append(_finding(w, row, gathers, step))
        ended = _end_waits(w, row) / w.steps
        if ended >= least:
            found.append(_ddp_finding(w, row, ended, step))
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
    gather_nodes = [c for c in row.collectives if "gather" in _name(w, c)]
    # the gathers themselves: a wait timed away from its launch is no call
    calls = sum(
        w.tree.value(c, "count") for c in gather_nodes if w.tree.node_frame(c).detail != WAITED
    ) / max(steps, 1)
    # waits for gathers launched in another module's fetch (prefetches), per step
    # by phase; the module's own gathers are the rest
    waits = {"forward": 0, "backward": 0}
    for c in gather_nodes:
        if w.tree.node_frame(c).detail == WAITED:
            phase = "forward" if w.phase(c) == "forward" else "backward"
            waits[phase] += w.tree.value(c, "exposed_comm_ns")
    waited = sum(waits.values()) / steps
    own_forward = (_part(row.exposed_by, "all-gather", "forward") - waits["forward"]) / steps
    own_backward = (
        _part(row.exposed_by, "all-gather")
        - _part(row.exposed_by, "all-gather", "forward")
        - waits["backward"]
    ) / steps
    reduces = _part(row.exposed_by, "reduce-scatter") / steps
    fqn = row.module.name
    severity, caveat = w.judge("warning", gathers)
    split = ", ".join(
        f"{label} {ms(v)}" for label, v in (("forward", forward), ("backward", backward)) if v
    )
    message = (
        f"the step waits {ms(gathers)} per step ({percent(gathers / step)}) for `{fqn}`'s "
        f"parameter all-gathers ({split}"
        + (f"; {size(moved)} a step" if moved else "")
        + (f"; {ms(waited)} of it for a prefetch another module's fetch launched" if waited else "")
        + ")"
        + (f", and {ms(reduces)} for its gradients' reduce-scatters" if reduces >= 1e5 else "")
        + (f" ({caveat})" if caveat else "")
    )
    return finding(
        "exposed_communication",
        severity,
        message,
        ADVICE.get(row.sharded_by, fsdp2_advice)(
            w,
            row,
            own_forward,
            own_backward,
            moved,
            calls,
            reduces,
            waited,
        ),
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
        **_gathers_gain(w, row, gathers),
    )


def _gathers_gain(w: Window, row: ModuleComm, gathers: float) -> dict[str, Any]:
    """What the advice saves of ``gathers`` ns of exposed all-gathers a step:
    all of it, hidden behind other work. FSDP1 on CPU gathers on the thread
    that asks, where nothing hides a gather: there the unit's unshards in
    backward, which keeping its parameters gathered from forward spares."""
    fqn = row.module.name
    if row.sharded_by == FSDP1 and w.cpu_only:
        return {
            "gain_ns": _backward_unshards(w, row),
            "gain_basis": f"{fqn}'s unshards in backward per step (its all-gathers and FSDP's "
            "copies around them): kept gathered from forward, it gathers none in backward; "
            "on gloo nothing hides its forward's",
        }
    return {
        "gain_ns": gathers,
        "gain_basis": f"{fqn}'s all-gathers' exposed time per step (the call and the waits on "
        "it), all of it hidden behind other work: an upper bound, that work must be there",
    }


def _backward_unshards(w: Window, row: ModuleComm) -> float:
    """ns per step of the row's sharding frames in backward that hold its
    all-gathers (each outermost one whole: the gather and the runtime's
    copies around it)."""
    tree, outermost = w.tree, set()
    for c in row.collectives:
        if w.phase(c) != "backward" or "gather" not in _name(w, c):
            continue
        above = [n for n in tree.path(c)[:-1] if tree.node_frame(n).kind == "sharding"]
        if above:
            outermost.add(above[0])
    return sum(w.cpu[n] for n in outermost) / w.steps


def _end_waits(w: Window, row: ModuleComm) -> int:
    """The row's waits for DDP's buckets at the end of backward, in ns."""
    return sum(
        w.tree.value(c, "exposed_comm_ns")
        for c in row.collectives
        if w.tree.node_frame(c).detail == END_OF_BACKWARD
    )


def _ddp_finding(w: Window, row: ModuleComm, ended: float, step: float) -> dict[str, Any]:
    """The step waits ``ended`` ns per step for DDP's buckets when backward ends."""
    steps = w.steps
    reduces = w.tree.find_all(
        lambda f: f.backward and operation(f.name) == "all-reduce" and f.detail not in WAITS
    )
    buckets = sum(w.tree.value(c, "count") for c in reduces) / max(steps, 1)
    moved = sum(w.tree.value(c, "comm_bytes") for c in reduces) / max(steps, 1)
    fqn = row.module.name
    severity, caveat = w.judge("warning", ended)
    plural = "s" if round(buckets) != 1 else ""
    message = (
        f"the step waits {ms(ended)} per step ({percent(ended / step)}) when backward ends for "
        f"DDP's gradient all-reduce ({buckets:.0f} bucket{plural}, {size(moved)} a step), after "
        f"`{fqn}`'s gradients, the last it reduces" + (f" ({caveat})" if caveat else "")
    )
    advice = [
        "the buckets still on the wire when backward ends are the last DDP launched, holding "
        f"the gradients of `{fqn}` and the modules before it: smaller buckets launch sooner and "
        f"leave less to wait for ({_smaller_buckets(ddp_settings(w.profile.env), moved)})",
        "when accumulating gradients, skip the all-reduce on all but the last micro-batch "
        "(`with model.no_sync():`)",
        "a rank that reaches the all-reduce late makes the others wait here: compare the ranks "
        "(`deepcontext report` on the run's directory)",
    ]
    if w.cpu_only:
        advice.insert(
            1,
            "gloo runs a bucket's all-reduce on a thread of its own beside the step's: on a "
            "host with no core to spare, a bucket launched sooner slows the backward it overlaps",
        )
    return finding(
        "exposed_communication",
        severity,
        message,
        "; ".join(advice),
        w.tree,
        row.nodes[-1],
        {
            "exposed_all_reduce_ns": int(ended),
            "all_reduce_bytes": int(moved),
            "buckets": round(buckets, 2),
            "comm_ns": int(row.comm_ns / steps),
            "step_ns": int(step),
        },
        gain_ns=ended,
        gain_basis=(
            "the wait for DDP's all-reduce when backward ends, per step, all of it hidden behind "
            "backward: an upper bound, the backward left to hide it behind must be there"
        ),
    )


def _smaller_buckets(settings: dict[str, str], moved: float) -> str:
    """The bucket cap to try: a quarter of the gradients a step reduces
    (``moved`` bytes), at most half the cap the run had (its ``ddp`` entry's
    ``bucket_cap_mb``), and never under 1 MiB."""
    try:
        cap = float(settings["bucket_cap_mb"])
    except (KeyError, ValueError):
        return "`DistributedDataParallel(..., bucket_cap_mb=...)`, 25 by default"
    smaller = max(int(min(cap / 2, moved / MIB / 4)), 1)
    if smaller >= cap:
        return f"`bucket_cap_mb` is {cap:g} already, as small as pays"
    buckets = settings.get("buckets")
    went = (
        f", its {size(moved)} of gradients in {buckets} bucket{'s' if buckets != '1' else ''}"
        if buckets
        else ""
    )
    return f"`DistributedDataParallel(..., bucket_cap_mb={smaller})`, now {cap:g}{went}"


def _name(w: Window, node: int) -> str:
    return w.tree.node_frame(node).name.lower()


def waiting_for(
    findings: list[dict[str, Any]], stragglers: list[dict[str, Any]], rank: int
) -> list[dict[str, Any]]:
    """``findings`` of ``rank`` with each ``exposed_communication`` finding
    whose wait a straggler explains told so: a straggler found across the
    ranks of its window (`busy.busy_straggler`, a ``load_imbalance`` finding
    measured by ``busy`` time) makes the other ranks wait in their next
    collective, and no prefetch hides a wait for a slower rank.

    A finding's wait for the straggler is its all-gathers' exposed time above
    the straggler's own for that module, at most the median of that over the
    waiting ranks (``all_gather_wait_ns_by_module``: the modules where the
    wait for it lands on every rank, which noise on one rank does not move),
    the findings together at most the wait it causes (``wait_ns``, biggest
    first). Where this rank waits there half that median or more, the finding says
    whom it waits for and how much, its advice is to even that rank's work
    out, not to prefetch (the rest of its wait the straggler has too, whose
    own findings advise on it), it is an ``info`` and its saving is the rest."""
    out = list(findings)
    for s in stragglers:
        e = s.get("evidence") or {}
        if e.get("measure") != "busy" or e.get("rank") == rank:
            continue
        own = e.get("all_gather_ns_by_module") or {}
        landed = e.get("all_gather_wait_ns_by_module") or {}
        parts = {}
        waits = (e.get("wait_ns_per_rank") or {}).get(str(rank), 0)
        for i, f in enumerate(out):
            ended = f["rule"] == "exposed_communication" and f["evidence"].get(
                "exposed_all_reduce_ns"
            )
            if ended and waits >= 0.5 * ended:  # DDP's wait: all of it is the ranks meeting
                out[i] = _told_ddp(f, s, min(waits, ended))
            elif f["rule"] == "exposed_communication" and f["path"] and f["path"][-1] in landed:
                gathers = f["evidence"].get("exposed_all_gather_ns", 0)
                parts[i] = min(max(gathers - own.get(f["path"][-1], 0), 0), landed[f["path"][-1]])
        budget = float(e.get("wait_ns", 0))  # no more than the wait it causes, biggest first
        for i in sorted(parts, key=lambda i: -parts[i]):
            part = min(parts[i], budget)
            if part and part >= 0.5 * landed[out[i]["path"][-1]]:
                out[i] = _told(out[i], s, part)
                budget -= part
    return out


def _told_ddp(f: dict[str, Any], straggler: dict[str, Any], part: float) -> dict[str, Any]:
    """DDP's end-of-backward wait ``f`` told that ``part`` ns per step of it is
    for the straggler: no bucket size hides that."""
    slow, ended = straggler["evidence"]["rank"], f["evidence"]["exposed_all_reduce_ns"]
    rest = ended - part
    return {
        **f,
        "severity": "info",
        "message": f"the step waits {ms(ended)} per step when backward ends for DDP's gradient "
        f"all-reduce, {ms(part)} of it because it waits for rank {slow} (rank {slow}'s "
        "load_imbalance finding)",
        "suggestion": f"even out rank {slow}'s work: smaller buckets cannot hide a wait for a "
        "slower rank",
        "evidence": {**f["evidence"], "waits_for": {"rank": slow, "wait_ns": int(part)}},
        "gain_ns": int(rest),
        "gain_basis": f"the wait for DDP's all-reduce less the {ms(part)} this rank waits for rank "
        f"{slow}: an upper bound",
    }


def _told(f: dict[str, Any], straggler: dict[str, Any], part: float) -> dict[str, Any]:
    """``f`` rewritten as a wait of ``part`` ns per step for the straggler."""
    e, evidence = straggler["evidence"], f["evidence"]
    slow, module = e["rank"], e.get("module")
    fqn = f["path"][-1].split(" (")[0]
    gathers = evidence["exposed_all_gather_ns"]
    rest = gathers - part
    name = f"`{module.split(' (')[0]}`" if module else None
    whose = (
        f"whose {name} takes {ms(e['module_excess_ns'])} more per step"
        if name
        else f"which is busy {ms(e['busy_ns_per_rank'][str(slow)] - e['median_busy_ns'])} more per step"
    )
    scale = (f.get("gain_ns") or 0) / gathers  # the rule's discount for a loaded host, kept
    _, sep, discount = f["gain_basis"].partition("; less the ")
    return {
        **f,
        "severity": "info",
        "message": f"the step waits {ms(gathers)} per step for `{fqn}`'s parameter all-gathers, "
        f"{ms(part)} of it because it waits for rank {slow}, {whose} than on the other ranks "
        f"(rank {slow}'s load_imbalance finding); {ms(rest)} is left to the gathers themselves",
        "suggestion": f"even out the work of {name or 'its step'} on rank {slow}: prefetching `{fqn}`, "
        "or keeping it gathered, cannot hide a wait for a slower rank"
        + (
            f"; rank {slow} waits the other {ms(rest)} in these gathers too, and its own findings "
            "say whether they are worth hiding"
            if rest >= 0.5 * part
            else ""
        ),
        "evidence": {
            **evidence,
            "waits_for": {
                "rank": slow,
                "module": module,
                "module_excess_ns": e.get("module_excess_ns"),
                "wait_ns": int(part),
            },
        },
        "gain_ns": int(rest * scale),
        "gain_basis": f"{fqn}'s all-gathers' exposed time per step less the {ms(part)} this rank "
        f"waits there for rank {slow}: what hiding the gathers could still save, an upper bound"
        + (f"; less the {discount}" if sep else ""),
    }


#: Advice by the runtime that shards the module (`ModuleComm.sharded_by`); FSDP2's otherwise.
ADVICE = {"ZeRO": zero_advice, FSDP1: fsdp1_advice}
