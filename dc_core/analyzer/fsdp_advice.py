"""The settings of FSDP2 (``fully_shard``) and FSDP1 (``FullyShardedDataParallel``)
that would hide, or spare, a module's exposed all-gathers: the advice of
``exposed_communication`` (`dc_core.analyzer.communication`) for the modules
each runtime shards, from the finding's figures per step."""

from __future__ import annotations

from ..model.comm import ModuleComm, fsdp1_settings
from .base import Window, size

MIB = 1 << 20


def fsdp2_advice(
    w: Window,
    row: ModuleComm,
    forward: float,
    backward: float,
    moved: float,
    calls: float,
    reduces: float,
    waited: float = 0,
) -> str:
    """FSDP2's settings that would hide the module's gathers."""
    fqn = row.module.name
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
    coarser = "shard at a coarser granularity (`fully_shard` the parent, not each child)"
    return "; ".join(out + _fewer(w, moved, calls, reduces, coarser))


def fsdp1_advice(
    w: Window,
    row: ModuleComm,
    forward: float,
    backward: float,
    moved: float,
    calls: float,
    reduces: float,
    waited: float = 0,
) -> str:
    """FSDP1's (``FullyShardedDataParallel``'s) settings that would hide or
    spare the unit's gathers, with their values in the run (the profile's
    ``fsdp`` entry) where it has them."""
    fqn = row.module.name
    held = size(moved / max(calls, 1))
    s = fsdp1_settings(w.profile.env)

    def now(key: str) -> str:
        return f", now `{s[key]}`" if key in s else ""

    out = []
    if w.cpu_only:
        out.append(
            "on CPU (gloo) FSDP gathers on the thread that asks, a prefetch included: nothing "
            "overlaps a gather here, fewer gathers are what saves"
        )
    elif forward and s.get("forward_prefetch") == "True":
        out.append(
            f"the forward prefetch is on and the step still waits for `{fqn}`'s gather: the "
            f"unit before it is too short to hide it"
        )
    elif forward:
        out.append(
            f"prefetch each unit's parameters during the forward of the unit before it "
            f"(`FullyShardedDataParallel(..., forward_prefetch=True)`{now('forward_prefetch')}), "
            f"so `{fqn}`'s gather overlaps that unit's compute"
        )
    if backward:
        # hybrid sharding keeps its replication across nodes in its ZeRO-2 form
        keep = (
            "_HYBRID_SHARD_ZERO2"
            if s.get("sharding_strategy") == "HYBRID_SHARD"
            else "SHARD_GRAD_OP"
        )
        prefetch = s.get("backward_prefetch")
        out.append(
            f"keep the parameters gathered from forward to backward "
            f"(`sharding_strategy=ShardingStrategy.{keep}`{now('sharding_strategy')}; no "
            f"backward all-gather, {held} more held per unit until its backward)"
            + (
                ""
                if w.cpu_only or prefetch == "BACKWARD_PRE"
                else ", or gather the next unit's before this one's gradients "
                f"(`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`{now('backward_prefetch')})"
            )
        )
    coarser = (
        f"wrap at a coarser granularity (an `auto_wrap_policy` that wraps the parent of "
        f"`{fqn}`, or a larger `min_num_params`)"
    )
    return "; ".join(out + _fewer(w, moved, calls, reduces, coarser))


def _fewer(w: Window, moved: float, calls: float, reduces: float, coarser: str) -> list[str]:
    """What both runtimes are told of small gathers (``coarser``: sharding
    coarser in the runtime's terms) and of gloo's reduce-scatter."""
    out = []
    if calls and moved / calls < MIB:
        out.append(
            f"each gather moves {size(moved / calls)}: at that size a gather's latency, not its "
            f"bytes, is the cost; {coarser} so fewer gathers carry the same bytes"
        )
    if reduces >= 1e5 and w.cpu_only:
        out.append("gloo runs the gradients' reduce-scatter synchronously: nothing hides it here")
    return out
