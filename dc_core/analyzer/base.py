"""What every rule works on: one profile seen as a window, plus small tree helpers.

Rules are pure functions ``rule(w: Window) -> list[dict]``; they read the tree
through the helpers here so that "an operator's context", "its scope" and
"its share of the window" mean the same thing in every rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cached_property
from typing import Any

from ..model.comm import is_collective, issuing
from ..model.kinds import CONTEXT_KINDS, OWN_OPERATORS
from ..model.opnames import op_name as bare_op_name
from ..model.tree import Frame, Tree
from ..store.profile import Profile
from .thresholds import Thresholds


def op_name(frame: Frame) -> str:
    """An operator frame's bare name (`dc_core.model.opnames.op_name`)."""
    return bare_op_name(frame.name)


def finding(
    rule: str,
    severity: str,
    message: str,
    suggestion: str,
    tree: Tree | None,
    node: int,
    evidence: dict[str, Any],
    *,
    gain_ns: float | None,
    gain_basis: str,
    gain_bytes: float | None = None,
) -> dict[str, Any]:
    """A finding as stored in the profile and shown by the report.

    ``gain_ns`` is the time per step the fix would save (an upper bound where
    the basis says so; None where no saving can be estimated) and
    ``gain_basis`` one sentence saying which nodes' time or bytes it is and
    why. A memory finding saves bytes instead: ``gain_bytes``, the bytes its
    fix takes off the window's memory peak, stored as
    ``evidence["gain_bytes"]`` (`saved_bytes` reads it back)."""
    if gain_bytes is not None:
        evidence = {**evidence, "gain_bytes": _gain(gain_bytes)}
    path = (
        [tree.node_frame(n).label() for n in tree.path(node)]
        if tree is not None and node > 0
        else []
    )
    return {
        "rule": rule,
        "severity": severity,
        "message": message,
        "suggestion": suggestion,
        "path": path,
        "evidence": evidence,
        "node": node if path else -1,
        "gain_ns": _gain(gain_ns),
        "gain_basis": gain_basis,
    }


def _gain(ns: float | None) -> int | None:
    """A saving as stored: whole ns, never negative, within int64 (None stays None;
    a non-finite estimate from damaged input is none)."""
    if ns is None or not math.isfinite(ns):
        return None
    return min(max(int(ns), 0), 2**63 - 1)


def saved_bytes(f: dict[str, Any]) -> int | None:
    """The bytes at the memory peak a finding's fix saves (None: not a memory saving)."""
    value = (f.get("evidence") or {}).get("gain_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def size(n: float) -> str:
    """Bytes in binary units: ``96.0 MiB``, ``1.5 GiB``, ``512 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def located(p: Profile) -> dict[str, Any]:
    """The evidence naming a finding's profile (see `dc_core.analyzer.attach`)."""
    return {"run": p.run, "rank": p.rank, "steps": list(p.steps)}


#: Rules whose saving is not scaled by the step's running share: step_outlier
#: leaves the host's share out itself; a wait for data is mostly the thread
#: blocked (reading, on a worker's queue), which a loaded host does not stretch;
#: an exposed collective is the thread blocked on its work, and hiding it takes
#: the whole wait off the step, however long the load made the transfer.
_OWN_DISCOUNT = frozenset(
    {"step_outlier", "dataloader_bottleneck", "io_bottleneck", "exposed_communication"}
)

#: Steps a window needs before a timing rule may warn: each node's quietest of
#: them is what the rules weigh, and one preempted step must not be all there is.
MIN_JUDGED_STEPS = 3


def percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def weighted_median(pairs: list[tuple[float, int]]) -> float:
    """Median of values each repeated ``weight`` times."""
    pairs = sorted(p for p in pairs if p[1] > 0)
    half = sum(w for _, w in pairs) / 2
    seen = 0
    for value, weight in pairs:
        seen += weight
        if seen >= half:
            return value
    return 0.0


def _no_accelerator(env: dict[str, str]) -> bool:
    """The environment an adapter recorded names no device: the PyTorch adapter
    writes ``cuda`` only when a device is present, the JAX adapter its backend."""
    if "backend" in env:
        return env["backend"] == "cpu"
    return "torch" in env and "cuda" not in env


class Window:
    """One profile as the rules see it.

    Attributes:
        profile: The profile analysed.
        tree: Its context tree.
        t: Thresholds in force.
        metric: The time metric context rules weigh: device time where the
            profile has it (kernels on a GPU, XLA ops on any JAX backend),
            host time otherwise.
        gpu: Whether the profile has device activity on an accelerator or GPU
            monitor series.
        cpu_only: Whether the run had no accelerator at all, as its environment
            says (PyTorch found no CUDA/ROCm device, or JAX ran on its ``cpu``
            backend); False where the environment does not say.
    """

    def __init__(self, profile: Profile, thresholds: Thresholds) -> None:
        self.profile = profile
        self.tree = profile.tree
        self.t = thresholds
        device = self.tree.total("device_time_ns") > 0
        no_accelerator = _no_accelerator(profile.env)
        # JAX's CPU backend has device time too: its XLA ops run on the CPU device.
        self.gpu = (device and not no_accelerator) or bool(profile.series("gpu_util_percent"))
        self.metric = "device_time_ns" if device else "cpu_time_ns"
        self.cpu_only = not self.gpu and no_accelerator
        self._ranges: dict[str, tuple[list[int], list[int]] | None] = {}
        self._top_scopes: dict[bool, dict[tuple, list[int]]] = {}
        self._incl_of: dict[str, list[int]] = {}  # inclusive columns of other metrics

    # --- sizes ----------------------------------------------------------------
    @cached_property
    def incl(self) -> list[int]:
        return self.tree.inclusive(self.metric)

    @cached_property
    def cpu(self) -> list[int]:
        return self.tree.inclusive("cpu_time_ns")

    @cached_property
    def device(self) -> list[int]:
        """Inclusive device time per node (all 0 where the profile has none)."""
        return self._inclusive("device_time_ns")

    @cached_property
    def total(self) -> int:
        """The window's size in ``metric`` (never 0, so shares stay finite)."""
        return max(self.incl[0], 1)

    @cached_property
    def host_total(self) -> int:
        """Host time of the window: what the tree saw, or the steps' wall time if longer."""
        return max(self.cpu[0], sum(self.profile.step_times_ns), 1)

    @property
    def steps(self) -> int:
        start, end = self.profile.steps
        return max(len(self.profile.step_times_ns), end - start, 1)

    def share(self, node: int) -> float:
        return self.incl[node] / self.total

    # --- per step -----------------------------------------------------------
    # A window's sums let one preempted step decide a rule: a 700x backward on
    # a loaded host. Timing rules weigh each node's quietest step instead (the
    # collector keeps, per node, its least and greatest time of one step):
    # noise only ever adds time, so a cost there is one every step paid.
    def marked(self, metric: str | None = None) -> int:
        """Steps the profile has per-step bounds of ``metric`` (default: the
        rules' ``metric``) for; 0: none (JAX's device time, older writers)."""
        name = f"{metric or self.metric}.min"
        return len(self.profile.step_times_ns) if name in self.profile.step_bounds else 0

    def _range(self, metric: str | None) -> tuple[list[int], list[int]] | None:
        metric = metric or self.metric
        if metric not in self._ranges:
            self._ranges[metric] = (
                self.profile.step_range(metric) if self.marked(metric) >= 2 else None
            )
        return self._ranges[metric]

    def _inclusive(self, metric: str | None) -> list[int]:
        if metric in (None, self.metric):
            return self.incl
        if metric not in self._incl_of:
            self._incl_of[metric] = self.tree.inclusive(metric)
        return self._incl_of[metric]

    def per_step(self, node: int, metric: str | None = None) -> float:
        """The node's mean inclusive ``metric`` per step."""
        return self._inclusive(metric)[node] / self.steps

    def quiet(self, node: int, metric: str | None = None) -> float:
        """The node's inclusive ``metric`` in one step, as noise cannot make
        it: a lower bound of its quietest step where steps are marked, else its mean."""
        bounds = self._range(metric)
        return bounds[0][node] if bounds else self.per_step(node, metric)

    def quiet_own(self, node: int, metric: str | None = None) -> float:
        """The node's exclusive ``metric`` in its quietest step (else its mean)."""
        metric = metric or self.metric
        if self._range(metric):
            return self.profile.step_bounds[f"{metric}.min"][node]
        return self.tree.value(node, metric) / self.steps

    def busiest(self, node: int, metric: str | None = None) -> float:
        """An upper bound of the node's inclusive ``metric`` in its busiest
        step (all of it where steps are not marked: one step may hold it all)."""
        bounds = self._range(metric)
        return bounds[1][node] if bounds else self.per_step(node, metric) * self.steps

    def quiet_sum(self, nodes: Iterable[int], metric: str | None = None) -> float:
        return sum(self.quiet(n, metric) for n in nodes)

    def mean_sum(self, nodes: Iterable[int], metric: str | None = None) -> float:
        """The nodes' mean ``metric`` per step: what a fix removing them saves
        on the mean step (noise a node's time draws goes with it)."""
        return sum(self.per_step(n, metric) for n in nodes)

    def mean_own(self, node: int, metric: str | None = None) -> float:
        """The node's mean exclusive ``metric`` per step."""
        return self.tree.value(node, metric or self.metric) / self.steps

    def with_lines(self, ops: list[int], metric: str | None = None) -> tuple[float, float]:
        """The operators' time per step with the code between them on their
        own lines (their anchors' exclusive time): quiet, and mean."""
        lines = {self.anchor(o) for o in ops} - {0}
        return (
            self.quiet_sum(ops, metric) + sum(self.quiet_own(n, metric) for n in lines),
            self.mean_sum(ops, metric) + sum(self.mean_own(n, metric) for n in lines),
        )

    def quiet_share(self, nodes: Iterable[int], metric: str | None = None) -> float:
        """Share of a quiet step the nodes hold (both sides quiet)."""
        return self.quiet_sum(nodes, metric) / max(self.quiet(0, metric), 1)

    def spread(self, nodes: list[int], metric: str | None = None) -> dict[str, int]:
        """Evidence of the nodes' time per step: quietest, mean, busiest."""
        return {
            "quiet_ns": int(self.quiet_sum(nodes, metric)),
            "mean_ns": int(sum(self.per_step(n, metric) for n in nodes)),
            "busiest_ns": int(sum(self.busiest(n, metric) for n in nodes)),
        }

    @cached_property
    def noise_caveat(self) -> str:
        """Why this window's timings cannot rule machine noise out ("" where they can)."""
        if self.marked() >= MIN_JUDGED_STEPS or (
            self.metric == "device_time_ns" and self.steps >= MIN_JUDGED_STEPS
        ):
            return ""
        return (
            f"{self.steps} step{'s' if self.steps != 1 else ''} cannot tell a cost from machine noise; "
            f"profile {MIN_JUDGED_STEPS} or more"
        )

    @cached_property
    def running_share(self) -> float:
        """Share of the window's step time its thread had a CPU (1 where the
        waits are unknown): a loaded host stretches every node's time by its
        inverse, which no fix in the program removes."""
        wall = sum(self.profile.step_times_ns)
        if not self.stolen or wall <= 0:
            return 1.0
        return min(max(1 - sum(self.stolen) / wall, 0.0), 1.0)

    def on_this_host(self, found: list[dict[str, Any]]) -> None:
        """Scale the findings' savings to the program's own time: less the
        share of the window the host gave to other work (`running_share`)."""
        share = self.running_share
        if share >= 0.99:
            return
        for f in found:
            if f.get("gain_ns") is not None and f["rule"] not in _OWN_DISCOUNT:
                f["gain_ns"] = int(f["gain_ns"] * share)
                f["gain_basis"] += (
                    f"; less the {percent(1 - share)} of the window the step waited for a CPU"
                )

    @cached_property
    def others_waited(self) -> float:
        """ns per step the process's other threads (intra-op workers) waited,
        runnable, for a CPU: time a parallel operator may show as its own."""
        return max(self.profile.others_wait_ns, 0) / self.steps

    @cached_property
    def loader_waited(self) -> float:
        """ns per step the data loader's worker processes waited, runnable,
        for a CPU: time a step waiting for their batches shows."""
        return max(self.profile.loader_wait_ns, 0) / self.steps

    def judge(self, severity: str, excess_ns: float) -> tuple[str, str]:
        """A timing finding's severity and caveat: ``info`` where too few steps
        rule noise out, or where its excess over normal per step is no more
        than the workers' wait for a CPU, which a loaded host puts there."""
        if self.noise_caveat:
            return "info", self.noise_caveat
        if excess_ns <= self.others_waited:
            return "info", (
                f"the process's other threads waited {ms(self.others_waited)} per step for a CPU, "
                "as much as this: the host's load may be all of it"
            )
        return severity, ""

    @cached_property
    def stolen(self) -> list[int]:
        """Per step, ns its thread waited, runnable, for a CPU (empty: unknown)."""
        waits = self.profile.step_wait_ns
        return list(waits) if len(waits) == len(self.profile.step_times_ns) else []

    def count(self, node: int) -> int:
        return self.tree.inclusive("count")[node] if node else 0

    # --- where a node sits ------------------------------------------------------
    # Each per-node answer comes from one top-down pass over the tree, never a
    # walk up from every node: a call chain may be 100,000 deep.
    def kind(self, node: int) -> str:
        return self.tree.node_frame(node).kind

    @cached_property
    def _phases(self) -> list[str | None]:
        tree, out = self.tree, [None] * len(self.tree)
        for n in tree.topdown():
            if n:
                frame = tree.node_frame(n)
                out[n] = frame.name if frame.kind == "phase" else out[tree.parent[n]]
        return out

    def phase(self, node: int) -> str | None:
        """Name of the phase above ``node`` (or of ``node`` itself)."""
        return self._phases[node]

    def phase_nodes(self, name: str) -> list[int]:
        """Outermost nodes of phase ``name``."""
        return [
            n
            for n in range(1, len(self.tree))
            if self.tree.node_frame(n).kind == "phase"
            and self.tree.node_frame(n).name == name
            and self.phase(self.tree.parent[n]) != name
        ]

    @cached_property
    def _anchors(self) -> list[int]:
        tree, out = self.tree, [0] * len(self.tree)
        for n in tree.topdown():
            if n:
                p = tree.parent[n]
                out[n] = p if p > 0 and self.kind(p) in CONTEXT_KINDS else out[p]
        return out

    def anchor(self, node: int) -> int:
        """Nearest ancestor that is user context (a line, a module, a compiled region); 0 if none."""
        return self._anchors[node]

    @cached_property
    def top_ops(self) -> list[int]:
        """Operator nodes with no operator above them: what user code called.
        A ``sharding`` frame's operators are a sharding runtime's (FSDP gathering
        and reducing a module's parameters), not the user's: left out, as is
        an operator that issues collectives without being one (FSDP's
        gradient-reducing autograd function). So is the profiler's own time
        (``deepcontext::call_paths``, a cold window resolving call paths):
        nothing the user can change."""
        tree, out = self.tree, []
        issuing = self._issuing
        stack = [0]
        while stack:
            node = stack.pop()
            for kid in tree.children(node):
                kind = self.kind(kid)
                if kind == "operator":
                    if tree.node_frame(kid).name.startswith(OWN_OPERATORS):
                        continue
                    if not issuing[kid] or is_collective(tree, kid):
                        out.append(kid)
                elif kind != "sharding":
                    stack.append(kid)
        return sorted(out)

    @cached_property
    def _issuing(self) -> list[int]:
        return issuing(self.tree)

    @cached_property
    def _contexts(self) -> tuple[list[int], list[int]]:
        """Per node: an id of its non-phase frames from the root down (equal
        ids, equal frame sequences) and its deepest non-phase node (0 if none)."""
        tree, ids = self.tree, {}
        ctx, last = [0] * len(tree), [0] * len(tree)
        for n in tree.topdown():
            if not n:
                continue
            p = tree.parent[n]
            if self.kind(n) == "phase":
                ctx[n], last[n] = ctx[p], last[p]
            else:
                ctx[n], last[n] = ids.setdefault((ctx[p], tree.node_frame(n)), len(ids) + 1), n
        return ctx, last

    def context_key(self, node: int, by_function: bool = False) -> tuple:
        """The context a node runs in, the phase left out (so forward and backward
        of one line share a key). ``by_function`` folds a function's lines together.
        Keys compare within one window."""
        ctx, last = self._contexts
        deepest = last[node]
        if not deepest:
            return ()
        frame = self.tree.node_frame(deepest)
        if by_function and frame.kind == "python":
            frame = Frame("python", frame.name, frame.file)
        return ctx[self.tree.parent[deepest]], frame

    def scopes(self, ops: list[int], by_function: bool = True) -> dict[tuple, list[int]]:
        """Group operator nodes by the context (function or line) that called them."""
        if ops is self.top_ops and by_function in self._top_scopes:  # several rules group them all
            return self._top_scopes[by_function]
        groups: dict[tuple, list[int]] = {}
        for op in ops:
            groups.setdefault(self.context_key(self.anchor(op), by_function), []).append(op)
        if ops is self.top_ops:
            self._top_scopes[by_function] = groups
        return groups

    def heaviest(self, nodes: list[int]) -> int:
        return max(nodes, key=lambda n: (self.incl[n], self.cpu[n]))

    def hot_context(self, node: int) -> int:
        """Walk down from ``node`` through the child holding most of the time
        (host time, then sampler hits) while it holds at least half; stop at
        operators. Where a phase's time is really spent, in the user's frames."""
        samples = self.tree.inclusive("samples")

        def weight(n: int) -> tuple[int, int]:
            return (self.cpu[n], samples[n])

        while True:
            kids = [k for k in self.tree.children(node) if self.kind(k) in CONTEXT_KINDS]
            if not kids:
                return node
            # compare host time; where the children have none (pure Python
            # work without operators), the sampler's hits
            index = 0 if any(self.cpu[k] for k in kids) else 1
            best = max(kids, key=weight)
            if not weight(best)[index] or 2 * weight(best)[index] < weight(node)[index]:
                return node
            node = best

    def per_call_ns(self, node: int) -> float:
        calls = self.tree.value(node, "count") or 1
        return self.cpu[node] / calls
