"""One window of one rank: the tree plus steps, system samples and environment.

`encode` / `decode` convert to and from the versioned protobuf message in
`profile.proto`. A decoded file that is corrupt or from a newer schema raises
`ProfileError` naming the file: `decode` checks everything the readers rely on
(the tree is a tree whose parents come before their children, every index is
in range, columns have their node's length, evidence is a shallow JSON object),
so no reader needs to distrust a decoded `Profile`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from ..model.kinds import KINDS, MONITOR_SERIES
from ..model.tree import Frame, Tree
from . import profile_pb2

#: 2: the control facts (analysis state, overrides, planned window, step
#: source, first step) are typed fields; version 1 kept them in ``env``.
logger = logging.getLogger("deepcontext")

SCHEMA_VERSION = 2

#: Deepest nesting of a finding's evidence; the analyzer writes 2 or 3 levels,
#: and JSON encoders recurse (TensorBoard's response cleaner as well).
MAX_EVIDENCE_DEPTH = 32

#: Where a version-1 file kept each control fact in ``env`` (read, never written).
V1_ENV_KEYS = ("analysis", "analyzer_overrides", "planned_window", "step_source", "first_step")


class ProfileError(Exception):
    """A profile file that cannot be read; ``file`` names it."""

    def __init__(self, file: str | Path, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = str(file)
        self.message = message

    def __reduce__(self):  # picklable across worker processes (the default passes one argument)
        return (ProfileError, (self.file, self.message))


def mark_pending(profile: Profile, overrides: dict[str, float] | None = None) -> None:
    """Mark ``profile`` as written without its findings, to be analysed where it
    is read with ``overrides`` (so a window closes without paying for it)."""
    profile.analysis_pending = True
    profile.analyzer_overrides = {k: float(v) for k, v in (overrides or {}).items()}


@dataclass
class Series:
    """One system-monitor time series (``device`` -1 = whole process/system)."""

    name: str
    device: int
    t_ns: list[int]
    values: list[float]

    @property
    def unit(self) -> str:
        return MONITOR_SERIES[self.name][0] if self.name in MONITOR_SERIES else "1"


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory over a window (``profile.proto``'s ``DeviceMemory``).

    The per-node bytes are tree metrics (`memory_metric`): the main device's,
    the first of `Profile.memory`, carry no suffix; another's end in
    ``@<device>``. Times are relative to the window start.
    """

    device: str  # "cpu", "cuda:0"
    peak_bytes: int = 0  # the highest live total over the window
    peak_t_ns: int = 0
    peak_node: int = -1  # whose allocation reached the peak; -1 unknown
    peak_step: int = -1  # -1 unknown
    peak_phase: str = ""
    #: Of the peak: allocations made before the window (parameters, optimizer state).
    held_at_peak_bytes: int = 0
    #: The allocator's own highest total over the window's allocations, as it reported it.
    allocator_peak_bytes: int = 0
    max_reserved_bytes: int = 0  # the allocator's highest reserved total (0 on CPU)
    live_dropped: int = 0  # allocations not tracked: the live map was full
    unknown_frees: int = 0  # frees of allocations not tracked
    #: Highest allocated bytes per bucket (``timeline_bytes``) from each bucket's start.
    timeline_t_ns: list[int] = field(default_factory=list)
    timeline_bytes: list[int] = field(default_factory=list)


#: The `DeviceMemory` fields, in the message's order (the report's JSON names them too).
DEVICE_MEMORY_FIELDS = tuple(profile_pb2.DeviceMemory.DESCRIPTOR.fields_by_name)


def memory_metric(metric: str, memory: list[DeviceMemory], device: str) -> str:
    """The tree metric holding ``metric`` (``peak_live_bytes``,
    ``peak_live_bytes.gradient``...) for ``device``: unsuffixed for the main
    device (the first of ``memory``), ``<metric>@<device>`` for the others."""
    return metric if memory and memory[0].device == device else f"{metric}@{device}"


@dataclass
class Profile:
    """A profiled window of one rank. ``steps`` is ``(start, end_exclusive)``."""

    tree: Tree
    steps: tuple[int, int]
    step_times_ns: list[int] = field(default_factory=list)
    run: str = "."
    rank: int = 0
    host: str = ""
    framework: str = "python"
    mode: str = "lightweight"
    system: list[Series] = field(default_factory=list)
    drops: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    start_unix_ns: int = 0
    duration_ns: int = 0
    init_ns: int = -1
    world_size: int = 1
    source: str = ""  # the file this profile was read from
    #: Per node, ``"cpu_time_ns.min"`` / ``"cpu_time_ns.max"``: the least and
    #: greatest exclusive value of one step over the window's steps (empty in
    #: profiles written before steps were marked); see `step_range`.
    step_bounds: dict[str, list[int]] = field(default_factory=dict)
    step_wait_ns: list[int] = field(default_factory=list)  # per step: runnable, waiting for a CPU
    # the window's other threads, runnable, waiting for a CPU (-1: unknown)
    others_wait_ns: int = -1
    # the window's data loader worker processes, runnable, waiting for a CPU (-1: unknown)
    loader_wait_ns: int = -1
    # ... and running on one (-1: unknown); how many there were at the window's end
    loader_cpu_ns: int = -1
    loader_workers: int = 0
    #: Written without its findings: analysed where read (`analyzer.findings_of`).
    analysis_pending: bool = False
    #: The threshold overrides that pending analysis uses (``"<rule>.<field>"`` → value).
    analyzer_overrides: dict[str, float] = field(default_factory=dict)
    #: The window the writer planned, ``(start, end_exclusive)``; None: not recorded.
    planned_window: tuple[int, int] | None = None
    #: What defined the steps when not the session itself (``deepcontext run``'s time range).
    step_source: str = ""
    #: The number of the first step the writing process saw; None: unknown.
    first_step: int | None = None
    #: Memory by device, the main device first; empty: memory was not collected.
    memory: list[DeviceMemory] = field(default_factory=list)
    #: Memory metrics the window asked for and its capture path could not give.
    memory_missing: list[str] = field(default_factory=list)
    memory_note: str = ""  # why they are missing
    #: The findings a pending profile's analysis gave (`analyzer.findings_of`
    #: memoises here): not the profile's data, never written or compared.
    analysed: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    def series(self, name: str) -> list[Series]:
        return [s for s in self.system if s.name == name]

    def step_range(self, metric: str = "cpu_time_ns") -> tuple[list[int], list[int]] | None:
        """Per node, bounds of its inclusive ``metric`` in one step: a lower
        bound of its quietest step and an upper bound of its busiest (each
        node's exclusive extremes summed over its subtree; extremes of
        different nodes may come from different steps). None where the
        profile has no step bounds for ``metric``."""
        low, high = self.step_bounds.get(f"{metric}.min"), self.step_bounds.get(f"{metric}.max")
        if low is None or high is None:
            return None
        return _subtree_sums(self.tree.parent, low), _subtree_sums(self.tree.parent, high)


def _subtree_sums(parent: list[int], column: list[int]) -> list[int]:
    out = list(column)
    for node in range(len(parent) - 1, 0, -1):  # parents come first
        out[parent[node]] += out[node]
    return out


def encode(profile: Profile) -> bytes:
    """Serialise a profile to the protobuf wire format."""
    strings: dict[str, int] = {"": 0}

    def sid(text: str) -> int:
        index = strings.get(text)
        if index is None:
            index = strings[text] = len(strings)
        return index

    tree = profile.tree
    msg = profile_pb2.Profile(
        version=SCHEMA_VERSION,
        run=profile.run,
        rank=profile.rank,
        host=profile.host,
        framework=profile.framework,
        mode=profile.mode,
        step_start=profile.steps[0],
        step_end=profile.steps[1],
        step_times_ns=profile.step_times_ns,
        start_unix_ns=profile.start_unix_ns,
        duration_ns=profile.duration_ns,
        init_ns=profile.init_ns,
        world_size=profile.world_size,
    )
    msg.tree.parent.extend(tree.parent)
    msg.tree.frame.extend(tree.frame)
    for f in tree.frames:
        msg.tree.frames.add(
            kind=KINDS.index(f.kind),
            name=sid(f.name),
            file=sid(f.file),
            line=max(f.line, 0),
            detail=sid(f.detail),
            backward=f.backward,
        )
    for name, column in tree.excl.items():
        msg.tree.metrics.add(name=name, unit=tree.units.get(name, "1"), values=column)
    for name, column in profile.step_bounds.items():
        msg.step_bounds.add(
            name=name, unit=tree.units.get(name.partition(".")[0], "1"), values=column
        )
    msg.step_wait_ns.extend(profile.step_wait_ns)
    msg.others_wait_ns = profile.others_wait_ns + 1  # 0 on the wire: unknown
    msg.loader_wait_ns = profile.loader_wait_ns + 1
    msg.loader_cpu_ns = profile.loader_cpu_ns + 1
    msg.loader_workers = profile.loader_workers
    for s in profile.system:
        msg.system.add(name=s.name, unit=s.unit, device=s.device, t_ns=s.t_ns, values=s.values)
    msg.drops.update(profile.drops)
    msg.env.update({k: str(v) for k, v in profile.env.items()})
    msg.analysis = (
        profile_pb2.ANALYSIS_PENDING if profile.analysis_pending else profile_pb2.ANALYSIS_DONE
    )
    msg.analyzer_overrides.update(profile.analyzer_overrides)
    if profile.planned_window is not None:
        msg.planned_start, msg.planned_end = profile.planned_window
    msg.step_source = profile.step_source
    if profile.first_step is not None:
        msg.first_step = profile.first_step
    for m in profile.memory:
        msg.memory.add(**{name: getattr(m, name) for name in DEVICE_MEMORY_FIELDS})
    msg.memory_missing.extend(profile.memory_missing)
    msg.memory_note = profile.memory_note
    for finding in profile.findings:
        msg.findings.add(
            rule=finding["rule"],
            severity=finding["severity"],
            message=finding["message"],
            suggestion=finding.get("suggestion", ""),
            path=finding.get("path", []),
            evidence_json=json.dumps(finding.get("evidence", {}), sort_keys=True),
            node=finding.get("node", -1),
            gain_ns=finding.get("gain_ns"),
            gain_basis=finding.get("gain_basis", ""),
        )
    msg.strings.extend(strings)  # dicts keep insertion order = index order
    return msg.SerializeToString()


def decode(data: bytes, source: str | Path = "<bytes>") -> Profile:
    """Parse a profile; raises `ProfileError` for corrupt data or a newer schema."""
    msg = profile_pb2.Profile()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise ProfileError(source, f"corrupt profile ({exc})") from None
    if msg.version == 0:
        raise ProfileError(source, "not a DeepContext profile (no schema version)")
    if msg.version > SCHEMA_VERSION:
        raise ProfileError(
            source,
            f"schema version {msg.version} is newer than this DeepContext reads ({SCHEMA_VERSION}); upgrade",
        )
    strings = list(msg.strings)
    t = msg.tree
    n = len(t.parent)
    try:
        kinds, count = len(KINDS), len(strings)
        frames = []
        for f in t.frames:  # one pass: attribute reads on protobuf messages are the cost here
            kind, name, file, detail = f.kind, f.name, f.file, f.detail
            if kind >= kinds:
                raise ValueError("a frame has an unknown kind")
            if name >= count or file >= count or detail >= count:
                raise ValueError("a frame refers outside the string table")
            frames.append(
                Frame(
                    KINDS[kind], strings[name], strings[file], f.line, strings[detail], f.backward
                )
            )
        parent = list(t.parent)
        frame = list(t.frame)
        if n == 0 or len(frame) != n or parent[0] != -1:
            raise ValueError("tree columns are inconsistent")
        if max(frame) >= len(frames):  # uint32: never negative
            raise ValueError("a node refers outside the frames")
        if (bad := misparented(parent)) is not None:
            raise ValueError(
                f"parents do not form a tree: node {bad} has parent {parent[bad]}, "
                "not a node before it"
            )
        if any(len(m.values) != n for m in t.metrics):
            raise ValueError("a metric column has the wrong length")
        if any(len(m.values) != n for m in msg.step_bounds):
            raise ValueError("a step-bounds column has the wrong length")
        if any(len(s.t_ns) != len(s.values) for s in msg.system):
            raise ValueError("a system series has times and values of different lengths")
        if any(len(m.timeline_t_ns) != len(m.timeline_bytes) for m in msg.memory):
            raise ValueError("a memory timeline has times and bytes of different lengths")
        findings = [_finding(f, i) for i, f in enumerate(msg.findings)]
    except ValueError as exc:
        raise ProfileError(source, f"corrupt profile ({exc})") from None
    env = dict(msg.env)
    control = _control_v1(env, source) if msg.version == 1 else _control(msg)
    tree = Tree(
        frames=frames,
        parent=parent,
        frame=frame,
        excl={m.name: list(m.values) for m in t.metrics},
        units={m.name: m.unit for m in t.metrics},
    )
    return Profile(
        tree=tree,
        steps=(msg.step_start, msg.step_end),
        step_times_ns=list(msg.step_times_ns),
        run=msg.run,
        rank=msg.rank,
        host=msg.host,
        framework=msg.framework,
        mode=msg.mode,
        system=[Series(s.name, s.device, list(s.t_ns), list(s.values)) for s in msg.system],
        drops=dict(msg.drops),
        env=env,
        findings=findings,
        start_unix_ns=msg.start_unix_ns,
        duration_ns=msg.duration_ns,
        init_ns=msg.init_ns,
        world_size=msg.world_size or 1,
        source=str(source),
        step_bounds={m.name: list(m.values) for m in msg.step_bounds},
        step_wait_ns=list(msg.step_wait_ns),
        others_wait_ns=msg.others_wait_ns - 1,
        loader_wait_ns=msg.loader_wait_ns - 1,
        loader_cpu_ns=msg.loader_cpu_ns - 1,
        loader_workers=msg.loader_workers,
        memory=[_device_memory(m, n) for m in msg.memory],
        memory_missing=list(msg.memory_missing),
        memory_note=msg.memory_note,
        **control,
    )


def _device_memory(m: profile_pb2.DeviceMemory, nodes: int) -> DeviceMemory:
    """A stored device's memory; a peak node outside the tree, or a negative
    step, reads as unknown (-1)."""
    return DeviceMemory(
        device=m.device,
        peak_bytes=m.peak_bytes,
        peak_t_ns=m.peak_t_ns,
        peak_node=m.peak_node if 0 <= m.peak_node < nodes else -1,
        peak_step=max(m.peak_step, -1),
        peak_phase=m.peak_phase,
        held_at_peak_bytes=m.held_at_peak_bytes,
        allocator_peak_bytes=m.allocator_peak_bytes,
        max_reserved_bytes=m.max_reserved_bytes,
        live_dropped=m.live_dropped,
        unknown_frees=m.unknown_frees,
        timeline_t_ns=list(m.timeline_t_ns),
        timeline_bytes=list(m.timeline_bytes),
    )


def _control(msg: profile_pb2.Profile) -> dict[str, Any]:
    """The typed control fields of a version-2 message, as `Profile` keywords."""
    planned = (msg.planned_start, msg.planned_end)
    return {
        "analysis_pending": msg.analysis == profile_pb2.ANALYSIS_PENDING,
        "analyzer_overrides": dict(msg.analyzer_overrides),
        "planned_window": planned if planned[1] > planned[0] else None,
        "step_source": msg.step_source,
        "first_step": msg.first_step if msg.HasField("first_step") else None,
    }


def _control_v1(env: dict[str, str], source: str | Path) -> dict[str, Any]:
    """A version-1 file's control facts, taken out of the ``env`` just decoded
    (so ``env`` holds environment facts only, whichever version was read)."""
    analysis, overrides, planned, step_source, first = (env.pop(key, None) for key in V1_ENV_KEYS)
    try:
        parsed = json.loads(overrides) if overrides else {}
        typed = {str(k): float(v) for k, v in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        logger.warning(
            "DeepContext: %s has unreadable analyzer overrides; default thresholds used", source
        )
        typed = {}
    start, sep, end = (planned or "").partition("-")
    window = (
        (int(start), int(end))
        if sep and start.isdigit() and end.isdigit() and int(end) > int(start)
        else None
    )
    return {
        "analysis_pending": analysis == "pending",
        "analyzer_overrides": typed,
        "planned_window": window,
        "step_source": step_source or "",
        "first_step": int(first) if first and first.lstrip("-").isdigit() else None,
    }


#: From this many nodes on, `misparented` checks with numpy (its fixed cost
#: is a few microseconds; a Python loop's is per node).
VECTOR_FROM = 64


def misparented(parent: list[int]) -> int | None:
    """The first node but the root whose parent does not come before it
    (``0 <= parent[i] < i`` fails), or None when the parents form a tree.

    Every writer appends a node after its parent (`Tree.child`, the native and
    the reference collectors), so this O(n) test is what "the parents form a
    tree rooted at node 0" means for a file: no cycle, no second root, every
    node reachable from the root, and index order is a top-down order. Both
    paths test that one condition, so they reject the same trees.
    """
    if len(parent) < VECTOR_FROM:
        return next((i for i, p in enumerate(parent) if i and not 0 <= p < i), None)
    p = np.asarray(parent, np.int64)
    wrong = np.flatnonzero((p[1:] < 0) | (p[1:] >= np.arange(1, len(p))))
    return int(wrong[0]) + 1 if len(wrong) else None


def _finding(f: profile_pb2.Finding, index: int) -> dict[str, Any]:
    """A stored finding; raises ValueError when its evidence is not a shallow JSON object."""
    try:
        evidence = json.loads(f.evidence_json or "{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting beyond the parser's stack
        raise ValueError(f"finding {index} has unreadable evidence: {str(exc)[:80]}") from None
    if not isinstance(evidence, dict) or _depth(evidence) > MAX_EVIDENCE_DEPTH:
        raise ValueError(
            f"finding {index} evidence is not a JSON object nested at most {MAX_EVIDENCE_DEPTH} deep"
        )
    return {
        "rule": f.rule,
        "severity": f.severity,
        "message": f.message,
        "suggestion": f.suggestion,
        "path": list(f.path),
        "evidence": evidence,
        "node": f.node,
        "gain_ns": f.gain_ns if f.HasField("gain_ns") else None,
        "gain_basis": f.gain_basis,
    }


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (iterative: the value may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_EVIDENCE_DEPTH:
                stack.extend(
                    (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
                )
    return deepest
