"""A straggler among ranks that communicate, by busy time: a rank's step less
the time it waited for its collectives (root-inclusive ``exposed_comm_ns``).

The ranks of a sharded or data-parallel job end each step together: a slow
rank's extra work shows on the others as waits in their collectives, so step
times are equal and a window's time counts those waits as work. The slow
rank is found by the sharded module whose compute (`dc_core.model.comm.by_module`:
its time less the sharding runtime's and the collectives') exceeds the other
ranks' in each step (its quietest): planted 20 ms of extra forward work in
one block of one of 4 FSDP2 ranks read 20.0-21.1 ms, idle or under load, and
balanced ranks' modules at most 0.07 ms apart, where busy time (the step less
its waits) put the planted rank at 1.58-2.29x the median and balanced ranks
up to 1.32x on a loaded 2-core host. Busy time alone (``busy_ratio``) names a
rank whose excess is in no sharded module, unless its step's thread waited,
runnable, for a CPU as long as that excess (`Window.stolen`): beside two test
suites and a busy loop, a balanced rank's 1.51x was that.

A finding names the slow rank, the module, that module's excess per step and
the wait it causes on the other ranks (their exposed communication above the
slow rank's), the saving; its evidence carries what
`communication.waiting_for` needs to tell the waiting ranks'
``exposed_communication`` findings that they wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median
from typing import Any

from ..model.comm import ModuleComm, by_module, issuing
from .base import Window, finding, located, ms, percent
from .thresholds import Thresholds

#: ``locate(size, start, slow)``: the node under ``start`` holding the slow
#: rank's excess over the others in ``size(window, node)`` units, and that
#: excess (`ranks._excess_node`).
Locate = Callable[[Callable[[Window, int], float], int, Window], tuple[int, float]]


def busy_straggler(
    windows: dict[int, Window], locate: Locate, t: Thresholds
) -> dict[str, Any] | None:
    """The rank with a sharded module whose compute, in each step, exceeds
    the other ranks' by ``load_imbalance.min_excess`` of the median step or
    more (`_slow_module`); else the rank busy ≥ ``load_imbalance.busy_ratio``
    x the ranks' median per step, by that much. Either way the other ranks
    must wait for it in their collectives (half its excess or more). The
    ranks carry communication metrics."""
    exposed = {r: w.tree.inclusive("exposed_comm_ns") for r, w in windows.items()}
    busy = {r: max(w.cpu[0] - exposed[r][0], 0) / w.steps for r, w in windows.items()}
    med = median(busy.values())
    step = median(w.host_total / w.steps for w in windows.values())
    least = t["load_imbalance.min_excess"] * step
    # sharded modules only: a data-parallel bucket's module (DDP's) is any
    # module, whose compute a loaded host moves by milliseconds in each step
    rows = {
        r: {row.name: row for row in by_module(w.tree) if row.sharded_by}
        for r, w in windows.items()
    }
    rank, module, excess, theirs, quiet = _slow_module(windows, rows)
    if module is None or quiet < least:
        module, rank = None, max(busy, key=busy.get)
        if not med or busy[rank] < t["load_imbalance.busy_ratio"] * med:
            return None
        # its step's thread waited, runnable, for a CPU as long as its excess:
        # a loaded host preempting this rank more than the others can be all of it
        if busy[rank] - med <= sum(windows[rank].stolen) / windows[rank].steps:
            return None
    over = busy[rank] - med
    if max(over, excess if module else 0) < least:
        return None
    slow, others = windows[rank], {r: w for r, w in windows.items() if r != rank}
    # what each other rank waits per step beyond the slow rank's own waits
    waits = {
        r: max(exposed[r][0] / w.steps - exposed[rank][0] / slow.steps, 0)
        for r, w in others.items()
    }
    gathers = {
        r: {name: _gathers(row) / windows[r].steps for name, row in by_name.items()}
        for r, by_name in rows.items()
    }
    # ... or, where they meet it, at one module's gathers: with 4 ranks on 2
    # cores each rank's waits are mostly the host's scheduling (110-130 ms a
    # step for 20 ms planted), which the totals' difference carries and the
    # same module's on every rank cancels (18.4-18.7 ms there)
    landing = max(
        (
            median(
                g.get(name, 0.0) - gathers[rank].get(name, 0.0)
                for r, g in gathers.items()
                if r != rank
            )
            for name in set().union(*gathers.values())
        ),
        default=0.0,
    )
    wait = min(max(median(waits.values()), landing), max(over, excess if module else 0))
    if wait < 0.5 * (quiet if module else over):
        return None

    def size(w: Window, node: int) -> float:
        return (w.cpu[node] - exposed[w.profile.rank][node]) / w.steps

    # a module's excess may be in its forward or its backward
    starts = module.nodes if module is not None else [0]
    node, _ = max((locate(size, s, slow) for s in starts), key=lambda found: found[1])
    where = slow.tree.node_frame(node).label() if node else "time outside the profiled context"
    fqn = module.module.name if module is not None else None
    part = (
        f"`{fqn}` computes {ms(excess)} more per step there than on the other ranks "
        f"({ms(excess + theirs)} vs {ms(theirs)}; {ms(quiet)} more in each step)"
        if module is not None
        else f"its extra time is in {where}"
    )
    return finding(
        "load_imbalance",
        "warning",
        f"rank {rank} is a straggler: {part}; it is busy {ms(busy[rank])} per step (its step less "
        f"its waits for communication) against a median of {ms(med)} ({busy[rank] / med:.2f}x), "
        f"and the other ranks wait {ms(wait)} per step for it in their collectives "
        f"({percent(wait / step)} of the step)",
        (f"even out the work of `{fqn}` on rank {rank}" if fqn else f"even out rank {rank}'s work")
        + ": check rank-specific code (hooks, logging, checkpointing on one rank) and each rank's "
        "data (sequence lengths per rank); the other ranks' exposed communication there is this "
        "wait, which prefetching cannot hide",
        slow.tree,
        node,
        {
            **located(slow.profile),
            "measure": "busy",
            "ratio": round(busy[rank] / med, 3) if med else None,
            "busy_ns_per_rank": {str(r): int(v) for r, v in sorted(busy.items())},
            "median_busy_ns": int(med),
            "step_ns": int(step),
            "module": module.name if module is not None else None,
            "module_excess_ns": int(excess) if module is not None else None,
            "module_quiet_excess_ns": int(quiet) if module is not None else None,
            "wait_ns": int(wait),
            "wait_ns_per_rank": {str(r): int(v) for r, v in sorted(waits.items())},
            # per module, the slow rank's own exposed all-gathers, and how much
            # longer the other ranks (their median) wait in them: where the wait
            # for it lands (`communication.waiting_for`)
            "all_gather_ns_by_module": {name: int(v) for name, v in gathers[rank].items()},
            "all_gather_wait_ns_by_module": _landed(gathers, rank, wait),
        },
        gain_ns=wait,
        gain_basis=f"the other ranks' exposed communication per step above rank {rank}'s (their median, "
        "in all or at the module where they meet it, whichever is more; at most its extra time): "
        "the wait for it that evening the work out saves",
    )


def _slow_module(
    windows: dict[int, Window], rows: dict[int, dict[str, ModuleComm]]
) -> tuple[int, ModuleComm | None, float, float, float]:
    """The rank and sharded module whose compute exceeds the other ranks'
    median the most in each step (a module a rank lacks computes 0 there):
    the rank, the row, its excess per step, the others' median compute per
    step, and the excess of its quietest step (`quiet_compute`) over the
    others' quietest. Weighed by the quiet excess: a loaded host preempts a
    rank in one step's module (3 ms of a 0.5 ms module on a 2-core host
    running 10 ranks), never in every step's."""
    best: tuple[int, ModuleComm | None, float, float, float] = (-1, None, 0.0, 0.0, 0.0)
    quiet = {r: quiet_compute(windows[r], list(by_name.values())) for r, by_name in rows.items()}
    for rank, by_name in rows.items():
        others = [r for r in windows if r != rank]
        for name, row in by_name.items():
            theirs = median(
                rows[r][name].compute_ns / windows[r].steps if name in rows[r] else 0.0
                for r in others
            )
            calm = quiet[rank][name] - median(quiet[r].get(name, 0.0) for r in others)
            if calm > best[4]:
                excess = row.compute_ns / windows[rank].steps - theirs
                best = (rank, row, excess, theirs, calm)
    return best


def quiet_compute(w: Window, rows: list[ModuleComm]) -> dict[str, float]:
    """Per row, its compute (`dc_core.model.comm.by_module`'s: the module's
    time less other rows' modules, the sharding runtime's frames, the
    operators issuing collectives) in its quietest step: the sum of each
    of its nodes' least exclusive time in one step, a lower bound that one
    step's noise does not reach."""
    tree, sharded = w.tree, {row.module.name for row in rows}
    under = issuing(tree)
    out = {}
    for row in rows:
        total = 0.0
        for start in row.nodes:
            stack = [start]
            while stack:
                node = stack.pop()
                frame = tree.node_frame(node)
                if node != start and (
                    (frame.kind == "module" and frame.name in sharded)
                    or frame.kind == "sharding"
                    or (frame.kind == "operator" and under[node])
                ):
                    continue
                total += w.quiet_own(node, "cpu_time_ns")
                stack.extend(tree.children(node))
        out[row.name] = total
    return out


def _gathers(row: ModuleComm) -> int:
    return sum(v for k, v in row.exposed_by.items() if k.endswith(" all-gather"))


def _landed(gathers: dict[int, dict[str, float]], slow: int, wait: float) -> dict[str, int]:
    """Per module where the wait for the slow rank lands, the other ranks'
    median exposed all-gather time per step above the slow rank's: they meet
    it at the next collective, so the wait lands on the same module on each
    of them, and noise on one rank's other gathers stays out. A module lands
    a third of ``wait`` or more (a wait may split, forward and backward);
    on a loaded host the median rank's other gathers differed by 5 ms of 23."""
    out = {}
    for name in set().union(*gathers.values()):
        mine = gathers[slow].get(name, 0.0)
        extra = median(g.get(name, 0.0) - mine for r, g in gathers.items() if r != slow)
        if extra > 0 and extra >= wait / 3:
            out[name] = int(extra)
    return dict(sorted(out.items()))
