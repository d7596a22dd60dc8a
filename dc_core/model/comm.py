"""Communication by module: for each module that collectives serve, its
compute, its communication and the part of that the step waited for.

A collective is an operator node carrying a communication metric
(``comm_time_ns``, ``exposed_comm_ns``, ``comm_bytes``: `COMM_METRICS`). It
serves the nearest module above it: sharded training places a parameter
group's gathers and reductions under the module whose parameters they move
(``sharding`` frames, `dc_torch.sharding`). A module's forward and its
backward (its context mirrored under the backward phase) are one row, keyed by
the module's frames from the root down with the phases left out.

A row's compute is the time under its module that is neither another row's
module, nor the runtime's own work (a ``sharding`` frame; an operator that
issues collectives, as FSDP's gradient-reducing autograd function does), nor
a collective. The ``other`` phase is no row's: a backend's thread working for
a collective (gloo copying a gathered tensor into place) records there under
the collective's context, beside the step, not in the module's time.
One implementation, read by the analyzer (``exposed_communication``), the
terminal report and the tab, so the three agree to the nanosecond.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .tree import Frame, Tree

#: The metrics a collective carries: launch to completion, the part the
#: issuing thread waited (the call and every wait on its work), bytes moved.
COMM_METRICS = ("comm_time_ns", "exposed_comm_ns", "comm_bytes")

#: The detail of a collective's node that times a wait for it away from its
#: launch: in another module's sharding scope (a prefetch, waited for by the
#: module it gathers for). Exposed time, no call: its count is no collective's.
WAITED = "waited for here, launched in another module's scope"

#: The detail of a collective's node that times the end of a backward pass
#: where autograd's engine waits, in callbacks, for collectives that C++ code
#: issued during the pass: DDP's reducer waits there for its gradient buckets'
#: all-reduces, then copies them into the gradients. Exposed time (the wait;
#: the copies are its operators), no call. It sits where the pass ended,
#: under the module whose gradients came last: the last bucket's.
END_OF_BACKWARD = "waited for at the end of backward: DDP's gradient buckets"

#: The phase of threads in no scope of the step's: a backend's thread working
#: for a collective records there, under a mirror of the collective's context.
BESIDE = "other"

#: Details of the nodes that time a wait, not a collective's call.
WAITS = (WAITED, END_OF_BACKWARD)

#: Operators that are a data-parallel runtime's own work, whatever module
#: they run under: DDP's reducer copying gradients into its buckets
#: (``reducer::copy_``), dividing them by the world size (``mul_out``) and
#: copying the reduced buckets back (``ddp.reducer::copy_bucket_to_grad``).
RUNTIME_OPERATORS = ("torch::distributed::reducer::", "torch.distributed.ddp.reducer::")

#: What a collective does, from its operator's name (c10d's and the
#: ``dist.*`` spellings alike), in the order rows list them.
OPERATIONS = (
    ("all-gather", ("allgather", "all_gather")),
    ("reduce-scatter", ("reduce_scatter",)),
    ("all-reduce", ("allreduce", "all_reduce")),
)


#: The environment entry of a profile of DeepSpeed ZeRO training: its stage,
#: parameter dtype and the settings that decide how its communication runs,
#: as DeepSpeed's config names them (`zero_entry`, `zero_settings`).
ZERO_ENV = "zero"
ZERO_SETTINGS = (
    "overlap_comm",
    "reduce_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "stage3_param_persistence_threshold",
)
#: Bytes per element of the dtypes ZeRO trains in.
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def zero_entry(stage: int, dtype: str, settings: dict[str, object]) -> str:
    """``stage 3, float32: overlap_comm=False, reduce_bucket_size=…`` (the
    settings of `ZERO_SETTINGS` given, in that order)."""
    return f"stage {stage}, {dtype}: {_listed(settings, ZERO_SETTINGS)}"


def zero_settings(env: dict[str, str]) -> dict[str, str]:
    """The entry `zero_entry` wrote, read back (``stage``, ``dtype`` and each
    setting, as strings); empty when the profile has none."""
    entry = env.get(ZERO_ENV, "")
    head, _, listed = entry.partition(": ")
    stage, _, dtype = head.partition(", ")
    if not stage.startswith("stage "):
        return {}
    return {"stage": stage.removeprefix("stage "), "dtype": dtype, **_read(listed)}


#: The environment entry of a profile of FSDP1 training (the
#: ``FullyShardedDataParallel`` wrapper): the root's settings that decide how
#: its communication runs, by the names of its constructor's arguments
#: (`fsdp1_entry`, `fsdp1_settings`).
FSDP1_ENV = "fsdp"
FSDP1_SETTINGS = (
    "sharding_strategy",
    "forward_prefetch",
    "backward_prefetch",
    "limit_all_gathers",
    "use_orig_params",
    "param_dtype",
)


def fsdp1_entry(settings: dict[str, object]) -> str:
    """``sharding_strategy=FULL_SHARD, forward_prefetch=False, …`` (the
    settings of `FSDP1_SETTINGS` given, in that order)."""
    return _listed(settings, FSDP1_SETTINGS)


def fsdp1_settings(env: dict[str, str]) -> dict[str, str]:
    """The entry `fsdp1_entry` wrote, read back (each setting, as a string);
    empty when the profile has none."""
    return _read(env.get(FSDP1_ENV, ""))


#: The environment entry of a profile of DDP training
#: (``DistributedDataParallel``): the settings that decide when its buckets'
#: all-reduces launch, by the names of its constructor's arguments, and the
#: buckets its reducer made (`ddp_entry`, `ddp_settings`).
DDP_ENV = "ddp"
DDP_SETTINGS = (
    "bucket_cap_mb",
    "buckets",
    "gradient_as_bucket_view",
    "static_graph",
    "find_unused_parameters",
    "comm_hook",
)


def ddp_entry(settings: dict[str, object]) -> str:
    """``bucket_cap_mb=25, buckets=4, …`` (the settings of `DDP_SETTINGS`
    given, in that order)."""
    return _listed(settings, DDP_SETTINGS)


def ddp_settings(env: dict[str, str]) -> dict[str, str]:
    """The entry `ddp_entry` wrote, read back (each setting, as a string);
    empty when the profile has none."""
    return _read(env.get(DDP_ENV, ""))


def _listed(settings: dict[str, object], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in keys if k in settings)


def _read(listed: str) -> dict[str, str]:
    """``a=1, b=2`` as ``{"a": "1", "b": "2"}``; items without ``=`` left out."""
    out = {}
    for item in listed.split(", "):
        key, eq, value = item.partition("=")
        if eq and key:
            out[key] = value
    return out


def operation(name: str) -> str:
    """``all-gather``, ``reduce-scatter``, ``all-reduce`` or ``other``."""
    lowered = name.lower()
    for label, spellings in OPERATIONS:
        if any(s in lowered for s in spellings):
            return label
    return "other"


@dataclass
class ModuleComm:
    """One module's communication over a window (sums over its steps).

    Attributes:
        module: The module's frame (its name is its path in the model).
        path: Its frames from the root's first child down, phases left out.
        nodes: Its module nodes, one per phase it ran in (forward first).
        collectives: The collective nodes it is served by.
        compute_ns: Time of the module's own work (see the module docstring).
        runtime_ns: Time of the sharding runtime's work for it (``sharding``
            frames, an operator that issues collectives, DDP's reducer's
            operators, the collective calls), less ``exposed_ns``: what it cost the step besides
            waiting for communication. Compute, exposed communication and
            this add up to the module's time.
        comm_ns: The collectives' ``comm_time_ns``.
        exposed_ns: Their ``exposed_comm_ns``.
        bytes: Their ``comm_bytes``.
        calls: How many collectives ran.
        exposed_by: ``exposed_ns`` by ``"<phase> <operation>"``
            (``"backward all-gather"``).
        bytes_by: ``bytes`` likewise.
        sharded_by: The runtime that shards its parameters, as its
            ``sharding`` frames name it (`runtime_of`: ``FSDP``, ``ZeRO``,
            ``FullyShardedDataParallel``); "" for a module that is not
            sharded (a DDP bucket's).
    """

    module: Frame
    path: tuple[Frame, ...]
    nodes: list[int] = field(default_factory=list)
    collectives: list[int] = field(default_factory=list)
    compute_ns: int = 0
    runtime_ns: int = 0
    comm_ns: int = 0
    exposed_ns: int = 0
    bytes: int = 0
    calls: int = 0
    exposed_by: dict[str, int] = field(default_factory=dict)
    bytes_by: dict[str, int] = field(default_factory=dict)
    sharded_by: str = ""

    @property
    def name(self) -> str:
        return self.module.label()


def runtime_of(name: str) -> str:
    """The sharding runtime a ``sharding`` frame's name gives: ``FSDP`` for
    FSDP2's ``FSDP::pre_forward``, ``ZeRO`` for ``ZeRO::pre_forward``,
    ``FullyShardedDataParallel`` for FSDP1's ``FullyShardedDataParallel._pre_forward``."""
    return name.partition("::")[0].partition(".")[0]


def is_collective(tree: Tree, node: int) -> bool:
    frame = tree.node_frame(node)
    return frame.kind == "operator" and any(tree.value(node, m) for m in COMM_METRICS)


def has_communication(tree: Tree) -> bool:
    """Whether any node carries a communication metric."""
    return any(tree.total(m) for m in COMM_METRICS if m in tree.excl)


def issuing(tree: Tree) -> list[int]:
    """Per node, the collectives at or under it (all 0 without communication)."""
    out = [0] * len(tree)
    if not has_communication(tree):
        return out
    for node in reversed(tree.topdown()):
        out[node] += is_collective(tree, node)
        if node:
            out[tree.parent[node]] += out[node]
    return out


def by_module(tree: Tree, metric: str = "cpu_time_ns") -> list[ModuleComm]:
    """Per module served by collectives, most exposed first (then most
    communication, then name); compute in ``metric``. One pass down the tree."""
    if not has_communication(tree):
        return []
    n = len(tree)
    # per node: its non-phase path key and phase name
    key: list[tuple[Frame, ...]] = [()] * n
    phase: list[str] = [""] * n
    sharded: dict[tuple[Frame, ...], str] = {}  # modules whose parameters a runtime moves
    for node in tree.topdown():
        if not node:
            continue
        p, frame = tree.parent[node], tree.node_frame(node)
        if frame.kind == "phase":
            key[node], phase[node] = key[p], frame.name
            continue
        key[node], phase[node] = (*key[p], _forward(frame)), phase[p]
        # its forward work stands in the module's own call (`dc_torch.sharding`)
        if frame.kind == "sharding" and not frame.backward and tree.node_frame(p).kind == "module":
            sharded.setdefault(key[p], runtime_of(frame.name))
    # per node: the module it serves: the nearest sharded module above it,
    # else the nearest module (FSDP's gradient reduction may run inside an
    # autograd function placed under one of the module's own submodules)
    module: list[int] = [0] * n
    nearest: list[int] = [0] * n
    for node in tree.topdown():
        if not node:
            continue
        p, frame = tree.parent[node], tree.node_frame(node)
        module[node], nearest[node] = module[p], nearest[p]
        if frame.kind == "module":
            nearest[node] = node
            if key[node] in sharded:
                module[node] = node

    rows: dict[tuple[Frame, ...], ModuleComm] = {}
    for node in range(1, n):
        owner = module[node] or nearest[node]
        if not owner or not is_collective(tree, node):
            continue
        row = rows.get(key[owner])
        if row is None:
            row = rows[key[owner]] = ModuleComm(
                _forward(tree.node_frame(owner)), key[owner], sharded_by=sharded.get(key[owner], "")
            )
        row.collectives.append(node)
        what = f"{phase[node] or 'step'} {operation(tree.node_frame(node).name)}"
        exposed, moved = tree.value(node, "exposed_comm_ns"), tree.value(node, "comm_bytes")
        row.comm_ns += tree.value(node, "comm_time_ns")
        row.exposed_ns += exposed
        row.bytes += moved
        row.calls += 0 if tree.node_frame(node).detail in WAITS else tree.value(node, "count")
        row.exposed_by[what] = row.exposed_by.get(what, 0) + exposed
        row.bytes_by[what] = row.bytes_by.get(what, 0) + moved

    for node in range(1, n):
        frame = tree.node_frame(node)
        if frame.kind == "module" and key[node] in rows and phase[node] != BESIDE:
            rows[key[node]].nodes.append(node)
    incl = tree.inclusive(metric)
    under = issuing(tree)
    for row in rows.values():
        row.nodes.sort(key=lambda m: phase[m] != "forward")
        runtime = sum(incl[c] for c in row.collectives)  # the calls themselves
        for start in row.nodes:
            compute, outside = _split(tree, start, incl, under, rows, key)
            row.compute_ns += compute
            runtime += outside
        row.runtime_ns = max(runtime - row.exposed_ns, 0)
    return sorted(rows.values(), key=lambda r: (-r.exposed_ns, -r.comm_ns, r.name))


def _split(
    tree: Tree, start: int, incl: list[int], issuing: list[int], rows: dict, key: list
) -> tuple[int, int]:
    """``start``'s own time as (compute, runtime): its inclusive time less
    another row's module, less what is the runtime's (a sharding frame, an
    operator that issues collectives, as FSDP's gradient-reducing autograd
    function does, one of `RUNTIME_OPERATORS`) or a collective's."""
    compute, runtime, stack = incl[start], 0, list(tree.children(start))
    while stack:
        node = stack.pop()
        frame = tree.node_frame(node)
        if frame.kind == "module" and key[node] in rows:
            compute -= incl[node]
        elif frame.kind == "sharding" or (
            frame.kind == "operator" and (issuing[node] or frame.name.startswith(RUNTIME_OPERATORS))
        ):
            compute -= incl[node]
            runtime += incl[node] - _collectives(tree, node, incl)
        else:
            stack.extend(tree.children(node))
    return max(compute, 0), max(runtime, 0)


def _collectives(tree: Tree, start: int, incl: list[int]) -> int:
    """Inclusive time of the outermost collectives at or under ``start``."""
    total, stack = 0, [start]
    while stack:
        node = stack.pop()
        if is_collective(tree, node):
            total += incl[node]
        else:
            stack.extend(tree.children(node))
    return total


def _forward(frame: Frame) -> Frame:
    """The frame as forward has it (a mirrored context's frames are the same
    frames; a backward operator's flag left out)."""
    if not frame.backward:
        return frame
    return Frame(frame.kind, frame.name, frame.file, frame.line, frame.detail)
