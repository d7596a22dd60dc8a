"""Memory rules over one window collected with ``memory=True``:
``activation_memory``, ``optimizer_state_memory``, ``allocator_fragmentation``.

Each reads one device's memory at the window's peak (`Profile.memory`, the
main device first; per node, bytes live at the peak by category, billed to
the context that allocated them: `dc_core.store.profile.memory_metric`).
Their fixes save bytes, not time: ``gain_ns`` is None and the bytes the fix
takes off the peak are ``evidence["gain_bytes"]`` (`base.finding`). Byte
counts are exact, not noisy, so the thresholds are sizes worth acting on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..model.tree import Frame
from ..store.profile import DeviceMemory
from ..store.profile import memory_metric as device_metric
from .base import Window, finding, ms, percent, size

MIB = 1 << 20
GIB = 1 << 30


def _column(w: Window, device: DeviceMemory, metric: str) -> list[int]:
    """Inclusive ``metric`` (``peak_live_bytes.parameter``...) of ``device`` per node."""
    return w.tree.inclusive(device_metric(metric, w.profile.memory, device.device))


def _peak(w: Window, device: DeviceMemory) -> int:
    """The device's peak: as the collector saw it, else what the tree holds at it."""
    return device.peak_bytes or _column(w, device, "peak_live_bytes")[0]


# --- activation_memory ----------------------------------------------------------
@dataclass
class _Module:
    """One module's forward calls in the window, and what they saved for backward."""

    frame: Frame
    nodes: list[int] = field(default_factory=list)
    saved: int = 0  # bytes saved for backward at the peak, made inside it
    inside: int = 0  # ...less its output's (its last allocating operator's)


def _tail(w: Window, node: int, alloc: list[int]) -> int:
    """The operator that made ``node``'s output: down through its last child that
    allocated (children are in the order first run), to an operator."""
    while True:
        kids = [k for k in w.tree.children(node) if alloc[k] > 0]
        if not kids:
            return node
        node = kids[-1]
        if w.kind(node) == "operator":
            return node


def _nearest_modules(w: Window, node: int) -> list[int]:
    """The module nodes nearest below ``node`` (through lines and compiled regions)."""
    out, stack = [], list(w.tree.children(node))
    while stack:
        kid = stack.pop()
        kind = w.kind(kid)
        if kind == "module":
            out.append(kid)
        elif kind in ("python", "compiled"):
            stack.extend(w.tree.children(kid))
    return sorted(out)


def _forward_modules(w: Window, saved: list[int], alloc: list[int]) -> dict[Frame, _Module]:
    out: dict[Frame, _Module] = {}
    for n in range(1, len(w.tree)):
        frame = w.tree.node_frame(n)
        if frame.kind == "module" and not frame.backward and saved[n] and w.phase(n) == "forward":
            m = out.setdefault(frame, _Module(frame))
            m.nodes.append(n)
            m.saved += saved[n]
            m.inside += saved[n] - saved[_tail(w, n, alloc)]
    return out


def _kind_of(frame: Frame) -> str:
    """What repeated blocks share: their class, else their name without indices."""
    return frame.detail or re.sub(r"\d+", "#", frame.name)


@dataclass
class _Plan:
    """Checkpointing ``modules`` (one, or each of a repeated kind under ``parent``)."""

    gain: int
    parent: _Module
    modules: list[_Module]
    each: bool


def _plans(w: Window, mods: dict[Frame, _Module], need: float, saved_all: int) -> list[_Plan]:
    plans = []
    for m in mods.values():
        if m.saved < need:
            continue
        # Alone: its backward recomputes it while what ran after it is freed already;
        # at most what is saved outside it can have gone by then.
        plans.append(_Plan(min(m.inside, saved_all - m.saved), m, [m], each=False))
        kinds: dict[str, list[_Module]] = {}
        for frame in dict.fromkeys(
            w.tree.node_frame(k) for n in m.nodes for k in _nearest_modules(w, n)
        ):
            if frame in mods and frame != m.frame:
                kinds.setdefault(_kind_of(frame), []).append(mods[frame])
        for group in kinds.values():
            if len(group) >= 2 and sum(g.saved for g in group) >= need:
                # Each: one block's inside is live again while its backward runs.
                inside = [g.inside for g in group]
                plans.append(_Plan(sum(inside) - max(inside), m, group, each=True))
    return plans


def activation_memory(w: Window) -> list[dict[str, Any]]:
    """Activations saved for backward by one module (or a repeated kind of block)
    at ``min_share`` of the memory peak or more: checkpoint it (info)."""
    out = []
    for device in w.profile.memory:
        found = _activations(w, device)
        if found:
            out.append(found)
    return out


def _activations(w: Window, device: DeviceMemory) -> dict[str, Any] | None:
    saved = _column(w, device, "peak_live_bytes.saved_for_backward")
    peak = _peak(w, device)
    floor = w.t["activation_memory.min_mb"] * MIB
    if not saved[0] or peak <= 0:
        return None
    mods = _forward_modules(w, saved, _column(w, device, "alloc_bytes"))
    need = max(w.t["activation_memory.min_share"] * peak, floor)
    plans = [p for p in _plans(w, mods, need, saved[0]) if p.gain >= floor]
    if not plans:
        return None
    plan = max(plans, key=lambda p: (p.gain, -len(p.modules)))
    held = sum(m.saved for m in plan.modules)
    nodes = [n for m in plan.modules for n in m.nodes]
    recompute = w.mean_sum(nodes, "cpu_time_ns") + w.mean_sum(nodes, "device_time_ns")
    node = max(plan.parent.nodes, key=lambda n: saved[n])
    where = f"the {device.device} memory peak"
    if plan.each:
        kind = _kind_of(plan.modules[0].frame)
        names = [m.frame.name for m in plan.modules]
        what = (
            f"{names[0]} … {names[-1]}, the {len(names)} {kind} modules under "
            f"{plan.parent.frame.label()}, hold"
        )
        fix, suggestion = (
            "checkpointing each",
            "checkpoint each block: where they are called, x = torch.utils.checkpoint.checkpoint("
            "block, x, use_reentrant=False) (torch.utils.checkpoint.checkpoint_sequential for an "
            "nn.Sequential of them); each block keeps only its input, and its forward runs again "
            "in the backward",
        )
        basis = (
            f"the bytes saved for backward inside the {len(names)} blocks at the peak, less each "
            "one's last operator's (its output, which the code after it keeps) and less the "
            "largest block's (recomputed in the backward, one block at a time); their inputs, "
            "kept either way, are not counted"
        )
    else:
        label = plan.parent.frame.label()
        what, fix = f"{label} holds", "checkpointing it"
        suggestion = (
            f"call it through torch.utils.checkpoint.checkpoint({plan.parent.frame.name or 'module'}, "
            "*inputs, use_reentrant=False): it keeps only its inputs, and its forward runs again in "
            "the backward; for a stack of blocks, checkpoint each block instead"
        )
        basis = (
            f"the bytes saved for backward inside {label} at the peak, less its last operator's "
            "(its output, which the code after it keeps), and at most the bytes saved outside it "
            "(what the backward has freed when it recomputes this one); its inputs, kept either "
            "way, are not counted"
        )
    if w.profile.framework == "jax":
        fix = "rematerialising each" if plan.each else "rematerialising it"
        suggestion = (
            "wrap it (each block, for repeated blocks) in jax.checkpoint, or flax.linen.remat / "
            "nnx.remat for a Flax module: it keeps only its inputs, and its forward runs again "
            "in the backward"
        )
    return finding(
        "activation_memory",
        "info",
        f"{what} {size(held)} of activations saved for backward at {where}, {percent(held / peak)} "
        f"of its {size(peak)}; {fix} saves ≈ {size(plan.gain)} at the peak, for ≈ {ms(recompute)} "
        "per step of forward run again",
        suggestion,
        w.tree,
        node,
        {
            "device": device.device,
            "peak_bytes": peak,
            "saved_bytes": held,
            "inside_bytes": sum(m.inside for m in plan.modules),
            "saved_at_peak_bytes": saved[0],
            "checkpoint": "each" if plan.each else "module",
            "modules": [m.frame.label() for m in plan.modules],
            "recompute_ns": int(recompute),
        },
        gain_ns=None,
        gain_bytes=plan.gain,
        gain_basis=f"memory, not time: {basis}. An upper bound: the gradients made meanwhile take "
        "some back. Recomputing costs the forward's host time per step, plus its device time "
        f"where the window has it: ≈ {ms(recompute)}",
    )


# --- optimizer_state_memory -----------------------------------------------------
def optimizer_state_memory(w: Window) -> list[dict[str, Any]]:
    """The optimizer's state at ``min_ratio`` x the parameters or more (AdamW
    keeps two values per parameter): an 8-bit or sharded state (info)."""
    out = []
    for device in w.profile.memory:
        found = _optimizer_state(w, device)
        if found:
            out.append(found)
    return out


def _optimizer_state(w: Window, device: DeviceMemory) -> dict[str, Any] | None:
    state = _column(w, device, "peak_live_bytes.optimizer_state")
    params = _column(w, device, "peak_live_bytes.parameter")[0]
    if (
        params <= 0
        or state[0] < w.t["optimizer_state_memory.min_ratio"] * params
        or state[0] < w.t["optimizer_state_memory.min_mb"] * MIB
    ):
        return None
    peak = _peak(w, device)
    phases = w.phase_nodes("optimizer")
    node = max(phases, key=lambda n: state[n]) if phases else 0
    temporary = _column(w, device, "peak_live_bytes.temporary")
    temps = sum(temporary[n] for n in phases)
    jax = w.profile.framework == "jax"
    # optax has no 8-bit Adam; its first moment in bfloat16 halves half of the state
    gain = state[0] // 4 if jax else state[0] * 3 // 4
    ranks = max(w.profile.world_size, 1)
    sharded = state[0] * (ranks - 1) // ranks
    holders = sorted(
        (k for n in phases for k in w.tree.children(n) if w.kind(k) == "module" and state[k]),
        key=lambda k: -state[k],
    )
    shard = (
        f"each of the {ranks} ranks keeps 1/{ranks} of it, saving ≈ {size(sharded)}"
        if ranks > 1
        else "each of N ranks keeps 1/N of it"
    )
    return finding(
        "optimizer_state_memory",
        "info",
        f"the optimizer's state is {size(state[0])} at the {device.device} memory peak, "
        f"{state[0] / params:.1f}x the parameters' {size(params)} and {percent(state[0] / peak)} "
        f"of the peak's {size(peak)}; "
        + (
            f"a bfloat16 first moment saves ≈ {size(gain)} at the peak"
            if jax
            else f"an 8-bit state saves ≈ {size(gain)} at the peak"
        ),
        (
            "hold the first moment in bfloat16: optax.adamw(..., mu_dtype=jnp.bfloat16); over "
            "several devices, shard the state along the data axis (a NamedSharding of opt_state, "
            f"as ZeRO does): {shard}"
            if jax
            else "keep the state in 8 bits: bitsandbytes.optim.AdamW8bit (PagedAdamW8bit, "
            "Adam8bit) for AdamW/Adam; over several ranks, shard it with "
            f"torch.distributed.optim.ZeroRedundancyOptimizer or FSDP: {shard}"
            + (
                f"; fused=True also leaves out the {size(temps)} of temporaries the optimizer "
                "step held at this peak"
                if temps and device.peak_phase == "optimizer"
                else ""
            )
        ),
        w.tree,
        node,
        {
            "device": device.device,
            "peak_bytes": peak,
            "state_bytes": state[0],
            "parameter_bytes": params,
            "ratio": round(state[0] / params, 3),
            "optimizer_temporary_bytes": temps,
            "sharded_gain_bytes": sharded,
            "modules": [
                {"module": w.tree.node_frame(k).label(), "state_bytes": state[k]}
                for k in holders[:3]
            ],
        },
        gain_ns=None,
        gain_bytes=gain,
        gain_basis=(
            "memory, not time: Adam's first moment, half the optimizer state live at the peak, "
            "in 16 bits instead of 32: 1/4 of it, for a float32 state"
            if jax
            else "memory, not time: the optimizer state live at the peak held in 8 bits instead "
            "of 32, as bitsandbytes' block-wise quantised state is: 3/4 of it, for a float32 "
            "state (half of it for a 16-bit one)"
        ),
    )


# --- allocator_fragmentation ----------------------------------------------------
def allocator_fragmentation(w: Window) -> list[dict[str, Any]]:
    """A CUDA caching allocator reserving ``min_ratio`` x its highest allocated
    total or more, ``min_gb`` GiB above it: memory held in segments no
    allocation could reuse (warning)."""
    out = []
    for device in w.profile.memory:
        if not device.device.startswith("cuda"):
            continue
        reserved = device.max_reserved_bytes
        # the allocator's own total counts blocks made before the window too
        used = max(device.allocator_peak_bytes, device.peak_bytes)
        slack = reserved - used
        if (
            used <= 0
            or reserved < w.t["allocator_fragmentation.min_ratio"] * used
            or slack < w.t["allocator_fragmentation.min_gb"] * GIB
        ):
            continue
        out.append(
            finding(
                "allocator_fragmentation",
                "warning",
                f"{device.device}'s caching allocator reserved up to {size(reserved)} while at most "
                f"{size(used)} was allocated ({reserved / used:.1f}x): {size(slack)} reserved and "
                "unused at its highest",
                "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the job's environment "
                "(before CUDA starts): segments then grow in place instead of leaving gaps between "
                "blocks of odd sizes; if a spike outside this window (evaluation, one long batch) "
                "reserved it, torch.cuda.empty_cache() after the spike gives it back",
                None,
                -1,
                {
                    "device": device.device,
                    "max_reserved_bytes": reserved,
                    "allocated_peak_bytes": used,
                    "ratio": round(reserved / used, 3),
                },
                gain_ns=None,
                gain_bytes=slack,
                gain_basis="memory, not time: the allocator's highest reserved bytes above its "
                "highest allocated ones; an upper bound, a caching allocator keeps some slack",
            )
        )
    return out
