"""What every rule works on: one profile seen as a window, plus small tree helpers.

Rules are pure functions ``rule(w: Window) -> list[dict]``; they read the tree
through the helpers here so that "an operator's context", "its scope" and
"its share of the window" mean the same thing in every rule.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..model.kinds import CONTEXT_KINDS
from ..model.opnames import op_name as bare_op_name
from ..model.tree import Frame, Tree
from ..store.profile import Profile
from .thresholds import Thresholds

def op_name(frame: Frame) -> str:
    """An operator frame's bare name (`dc_core.model.opnames.op_name`)."""
    return bare_op_name(frame.name)


def finding(
    rule: str, severity: str, message: str, suggestion: str, tree: Tree | None, node: int, evidence: dict[str, Any]
) -> dict[str, Any]:
    """A finding as stored in the profile and shown by the report."""
    path = [tree.node_frame(n).label() for n in tree.path(node)] if tree is not None and node > 0 else []
    return {
        "rule": rule, "severity": severity, "message": message, "suggestion": suggestion,
        "path": path, "evidence": evidence, "node": node if path else -1,
    }


def located(p: Profile) -> dict[str, Any]:
    """The evidence naming a finding's profile (see `dc_core.analyzer.attach`)."""
    return {"run": p.run, "rank": p.rank, "steps": list(p.steps)}


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

    # --- sizes ----------------------------------------------------------------
    @cached_property
    def incl(self) -> list[int]:
        return self.tree.inclusive(self.metric)

    @cached_property
    def cpu(self) -> list[int]:
        return self.tree.inclusive("cpu_time_ns")

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
            n for n in range(1, len(self.tree))
            if self.tree.node_frame(n).kind == "phase" and self.tree.node_frame(n).name == name
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
        """Operator nodes with no operator above them: what user code called."""
        tree, out = self.tree, []
        stack = [0]
        while stack:
            node = stack.pop()
            for kid in tree.children(node):
                if self.kind(kid) == "operator":
                    out.append(kid)
                else:
                    stack.append(kid)
        return sorted(out)

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
        groups: dict[tuple, list[int]] = {}
        for op in ops:
            groups.setdefault(self.context_key(self.anchor(op), by_function), []).append(op)
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

