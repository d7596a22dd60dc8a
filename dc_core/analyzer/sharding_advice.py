"""The settings of FSDP2 (``fully_shard``), FSDP1 (``FullyShardedDataParallel``)
and DeepSpeed ZeRO-3 that would hide, or spare, a module's exposed
all-gathers: the advice of ``exposed_communication``
(`dc_core.analyzer.communication`) for the modules each runtime shards, from
the finding's figures per step."""

from __future__ import annotations

from ..model.comm import ELEMENT_BYTES, ModuleComm, fsdp1_settings, zero_settings
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


def zero_advice(
    w: Window,
    row: ModuleComm,
    forward: float,
    backward: float,
    moved: float,
    calls: float,
    reduces: float,
    waited: float = 0,
) -> str:
    """DeepSpeed ZeRO-3's settings that would hide the module's gathers, with
    their values in the run (the profile's ``zero`` entry) where it has them."""
    fqn = row.module.name
    z = zero_settings(w.profile.env)

    def now(key: str) -> str:
        return f" (now {z[key]})" if key in z else ""

    prefetched = _prefetched_for(w, row)
    if prefetched:
        # a coalesced gather of other modules' parameters, issued in this
        # module's fetch: the settings for this module's own gathers do not apply
        return (
            f"`{fqn}`'s gathers are ZeRO-3 prefetches issued in its fetch for {prefetched} "
            f"(`stage3_prefetch_bucket_size`{now('stage3_prefetch_bucket_size')}): those modules "
            f"wait for them; a prefetch hides a gather only behind the work between its issue "
            f"and its use, which the step does not have here"
        )
    per_call = moved / max(calls, 1)
    elements = int(per_call / ELEMENT_BYTES.get(z.get("dtype", ""), 4))
    out = []
    if waited:
        out.append(
            f"`{fqn}`'s parameters were prefetched and the step still waits for them here: "
            f"a larger `stage3_prefetch_bucket_size`{now('stage3_prefetch_bucket_size')} requests "
            f"them further ahead, behind more work, as far as `stage3_max_live_parameters`"
            f"{now('stage3_max_live_parameters')} allows"
        )
    if forward:
        bucket = z.get("stage3_prefetch_bucket_size", "")
        if bucket == "0":
            out.append(
                f"ZeRO-3 gathers `{fqn}`'s parameters only when it runs: prefetching is off "
                f"(`stage3_prefetch_bucket_size` 0); {elements} elements or more "
                f"gathers them during the modules before it"
            )
        elif bucket.isdigit() and int(bucket) < elements:
            out.append(
                f"a `stage3_prefetch_bucket_size` of {elements} elements or more (now {bucket}) "
                f"gathers `{fqn}`'s parameters during the modules before it"
            )
        elif bucket.isdigit():  # a prefetch covers it: the work before it is too short
            out.append(
                f"the prefetch (`stage3_prefetch_bucket_size` {bucket}) covers `{fqn}`'s "
                f"{elements} elements and the step still waits: the modules before it are too "
                f"short to hide its gather"
            )
        else:
            out.append(
                f"prefetch `{fqn}`'s parameters during the modules before it "
                f"(`stage3_prefetch_bucket_size` of {elements} elements or more)"
            )
    if backward:
        out.append(
            f"keep its parameters from forward to backward: a `stage3_max_reuse_distance`"
            f"{now('stage3_max_reuse_distance')} of more than the elements used in between "
            f"releases them no more"
        )
    if per_call and (backward or per_call < MIB or forward):
        parent = next((f for f in reversed(row.path[:-1]) if f.kind == "module"), None)
        small = per_call < MIB
        out.append(
            (
                f"each gather moves {size(per_call)}: at that size its latency, not its "
                "bytes, is the cost; "
                if small
                else ""
            )
            + f"with `stage3_param_persistence_threshold`{now('stage3_param_persistence_threshold')} "
            f"above {elements} elements its parameters stay whole on every rank (no gathers, "
            f"{size(per_call)} more per rank)"
            + (
                f", or `deepspeed.utils.set_z3_leaf_modules(model, [{parent.detail}])` "
                f"gathers it with its parent in one fetch"
                if small and parent is not None and parent.detail
                else ""
            )
        )
    if reduces >= 1e5:
        if w.cpu_only:
            out.append(
                "on the CPU the gradients' reduce-scatter runs in the backward's thread: "
                "nothing hides it here"
            )
        elif z.get("overlap_comm") == "False":
            out.append(
                "let the gradients' reduce-scatter run beside the backward (`overlap_comm: true`)"
            )
    return "; ".join(out)


def _prefetched_for(w: Window, row: ModuleComm) -> str:
    """What the row's all-gathers prefetch, where every one of them is a
    ZeRO-3 prefetch (its frame's detail: ``N parameters of a, b …``); "" else."""
    tree, wanted = w.tree, []
    for node in row.collectives:
        if "gather" not in w.tree.node_frame(node).name.lower():
            continue
        frame = tree.node_frame(tree.parent[node])
        if frame.kind != "sharding" or not frame.name.endswith("_prefetch"):
            return ""
        what = frame.detail.partition(", issued in ")[0]
        if what not in wanted:
            wanted.append(what)
    return "; ".join(wanted)
