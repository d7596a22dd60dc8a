"""Pure-Python reference collector: the executable specification of ``_native.pyi``.

Same constants, same methods (but for those the stub marks native only:
demangling and operator capture), same semantics as ``dc_core._native.Collector``;
``tests/collect/test_collector.py`` runs one suite against both. It favours clear
code over speed: it is what runs where the extension is not built, and what the
C++ collector is checked against.

Three things differ by necessity, not by contract:

* The C++ collector relies on the GIL alone. Here every Python-level
  read-modify-write could be interrupted by a thread switch, so shared state
  (frames, tree, metrics, scope registry) is guarded by one lock.
* The collector's own frames, and what they call, are never part of a call
  path (the C++ collector has no Python frames of its own).
* The sampler is a Python thread: it ticks only when it gets the GIL (a
  thread that keeps the GIL delays its ticks; the CPU time it ran is billed
  at the next one, or where the thread opens or closes a scope before it),
  and it ignores ``native=True`` (no native frames).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from array import array
from collections.abc import Sequence
from types import FrameType

from dc_core.collect import sysmon
from dc_core.collect.monitor import Monitor
from dc_core.collect.scopes import MAX_LENT, Scope, Stack, ancestor, stretch_node, take_lent
from dc_core.collect.step_bounds import StepBounds
from dc_core.collect.worker import Worker
from dc_core.model.kinds import KINDS, UNITS

# Frame kinds: their numbers are their places in the vocabulary.
KIND_ROOT = KINDS.index("root")
KIND_PYTHON = KINDS.index("python")
KIND_MODULE = KINDS.index("module")
KIND_OPERATOR = KINDS.index("operator")
KIND_NATIVE = KINDS.index("native")
KIND_KERNEL = KINDS.index("kernel")
KIND_PHASE = KINDS.index("phase")
KIND_COMPILED = KINDS.index("compiled")
KIND_SHARDING = KINDS.index("sharding")

#: Frame flag: an operator run in the backward pass (native/frames.h).
FLAG_BACKWARD = 1

#: Metrics registered by every collector at construction, in id order; their
#: units are the vocabulary's.
BUILTIN_METRICS = ("cpu_time_ns", "count", "samples")
METRIC_CPU_TIME = BUILTIN_METRICS.index("cpu_time_ns")
METRIC_COUNT = BUILTIN_METRICS.index("count")
METRIC_SAMPLES = BUILTIN_METRICS.index("samples")

# ``enter(..., user_depth=-2)``: take the innermost open scope's user depth
# without walking the stack (kInheritUserDepth in native/collector.h).
_INHERIT_USER_DEPTH = -2

_FRAME_COLUMNS = ("kind", "name", "file", "line", "detail", "flags")


def now_ns() -> int:
    """Monotonic clock (CLOCK_MONOTONIC) in nanoseconds; the clock of every scope."""
    return time.monotonic_ns()


# The collector's own files. A Python thread inside a reference-collector call
# has these frames (and whatever they call, e.g. threading) innermost; the C++
# collector has none there, so call paths stop above the outermost of them.
_OWN_FILES = frozenset(
    {
        now_ns.__code__.co_filename,
        sysmon.ProcReader.sample.__code__.co_filename,
        Worker.start.__code__.co_filename,
        Monitor.start.__code__.co_filename,
    }
)


def _outermost_first(frame: FrameType | None) -> list[FrameType]:
    """The stack of ``frame``, outermost first, cut above the collector's own frames."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    for depth, f in enumerate(frames):
        if f.f_code.co_filename in _OWN_FILES:
            return frames[:depth]
    return frames


class Collector:
    """See ``dc_core/_native.pyi`` for the contract of every method."""

    def __init__(self, max_nodes: int = 500_000, max_samples: int = 100_000) -> None:
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
        if max_samples < 0:
            raise ValueError(f"max_samples must be >= 0, got {max_samples}")
        self._max_nodes = max_nodes
        self._max_samples = max_samples
        self._lock = threading.RLock()
        # identity
        self._strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._frames = {column: array("q") for column in _FRAME_COLUMNS}
        self._frame_ids: dict[tuple, int] = {}
        self._skip: tuple[str, ...] = ()
        self._metric_names: list[str] = []
        self._metric_units: list[str] = []
        self._metric_ids: dict[str, int] = {}
        # tree and metric values (one column per metric, one entry per node)
        self._parent = array("q")
        self._depth = array("q")
        self._node_frame = array("q")
        self._children: dict[tuple[int, int], int] = {}
        self._mirrors: dict[tuple[int, int], int] = {}
        self._values: list[array] = []
        self._step_bounds = StepBounds()  # of cpu_time_ns, see mark_step
        # scopes: each thread finds its stack through a thread-local; the
        # registry (thread id -> stack) lets the sampler and reset() reach all
        # of them, and forgets a thread's stack when the thread ends.
        self._local = threading.local()
        self._stacks: weakref.WeakValueDictionary[int, Stack] = weakref.WeakValueDictionary()
        # background threads and what they collect
        self._sampler: Worker | None = None
        self._sample_period_ns = 10_000_000
        self._monitor = Monitor(max_samples)
        self._drops = {"nodes": 0, "samples": 0}

        self.intern(KIND_ROOT, "")
        self._new_node(-1, 0)
        for name in BUILTIN_METRICS:
            self.metric(name, UNITS[name])

    # --- identity -------------------------------------------------------
    def intern(
        self, kind: int, name: str, file: str = "", line: int = 0, detail: str = "", flags: int = 0
    ) -> int:
        key = (kind, name, file, line, detail, flags)
        with self._lock:
            frame = self._frame_ids.get(key)
            if frame is None:
                frame = self._frame_ids[key] = len(self._frames["kind"])
                values = (
                    kind,
                    self._string(name),
                    self._string(file),
                    line,
                    self._string(detail),
                    flags,
                )
                for column, value in zip(_FRAME_COLUMNS, values):
                    self._frames[column].append(value)
            return frame

    def _string(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        index = self._string_ids.get(text)
        if index is None:
            index = self._string_ids[text] = len(self._strings)
            self._strings.append(text)
        return index

    def skip_prefix(self, prefix: str) -> None:
        with self._lock:
            if prefix not in self._skip:
                self._skip += (prefix,)

    def metric(self, name: str, unit: str) -> int:
        with self._lock:
            metric = self._metric_ids.get(name)
            if metric is not None:
                if self._metric_units[metric] != unit:
                    raise ValueError(
                        f"metric {name!r} is registered with unit "
                        f"{self._metric_units[metric]!r}, not {unit!r}"
                    )
                return metric
            metric = self._metric_ids[name] = len(self._metric_names)
            self._metric_names.append(name)
            self._metric_units.append(unit)
            self._values.append(array("q", [0]) * len(self._parent))
            return metric

    # --- tree -----------------------------------------------------------
    def _new_node(self, parent: int, frame: int) -> int:
        node = len(self._parent)
        self._parent.append(parent)
        self._depth.append(self._depth[parent] + 1 if parent >= 0 else 0)
        self._node_frame.append(frame)
        for column in self._values:
            column.append(0)
        return node

    def _check(self, what: str, index: int, size: int) -> None:
        if not 0 <= index < size:
            raise IndexError(f"{what} {index} out of range [0, {size})")

    def child(self, parent: int, frame: int) -> int:
        with self._lock:
            self._check("node", parent, len(self._parent))
            self._check("frame", frame, len(self._frames["kind"]))
            node = self._children.get((parent, frame))
            if node is None:
                if len(self._parent) >= self._max_nodes:
                    self._drops["nodes"] += 1
                    return parent
                node = self._children[(parent, frame)] = self._new_node(parent, frame)
            return node

    def path(self, parent: int, frames: Sequence[int]) -> int:
        with self._lock:
            node = parent
            for frame in frames:
                node = self.child(node, frame)
            return node

    def mirror(self, node: int, top: int) -> int:
        with self._lock:
            self._check("node", node, len(self._parent))
            self._check("node", top, len(self._parent))
            found = self._mirrors.get((node, top))
            if found is None:
                frames, here = [], node
                # up to the root's child, not including it
                while here > 0 and self._parent[here] > 0:
                    frames.append(self._node_frame[here])
                    here = self._parent[here]
                found = self._mirrors[(node, top)] = self.path(top, frames[::-1])
            return found

    def parent(self, node: int) -> int:
        with self._lock:
            self._check("node", node, len(self._parent))
            return self._parent[node]

    def add(self, node: int, metric: int, value: int) -> None:
        with self._lock:
            self._check("metric", metric, len(self._values))
            self._check("node", node, len(self._parent))
            self._values[metric][node] += value

    def node_count(self) -> int:
        return len(self._parent)

    def mark_step(self) -> None:
        with self._lock:
            self._step_bounds.mark(self._values[METRIC_CPU_TIME])

    # --- Python call paths --------------------------------------------
    def _skipped(self, file: str) -> bool:
        return file.startswith(self._skip)

    def _user_depth(self, frame: FrameType | None) -> int:
        """Depth (outermost frame = 1) of the innermost non-skipped frame; 0 if none."""
        stack = _outermost_first(frame)
        for depth in range(len(stack), 0, -1):
            if not self._skipped(stack[depth - 1].f_code.co_filename):
                return depth
        return 0

    def _python_ids(self, frame: FrameType | None, floor: int) -> list[int]:
        """Interned non-skipped frames of ``frame``'s stack deeper than ``floor``, outermost first."""
        ids = []
        for depth, f in enumerate(_outermost_first(frame), start=1):
            code = f.f_code
            if depth > floor and not self._skipped(code.co_filename):
                name = getattr(code, "co_qualname", code.co_name)  # co_qualname: 3.11+
                ids.append(self.intern(KIND_PYTHON, name, code.co_filename, f.f_lineno or 0))
        return ids

    def python_frames(self) -> list[int]:
        with self._lock:
            scopes = self._stack()
            floor = scopes[-1].user_depth if scopes else 0
            return self._python_ids(sys._getframe(), floor)

    # --- scopes (per thread) -------------------------------------------
    def _stack(self) -> Stack:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = Stack()
            self._stacks[threading.get_ident()] = stack
        elif stack.pid != os.getpid():
            stack.bind()
        return stack

    def enter(
        self, frames: Sequence[int], parent: int = -1, capture: bool = False, user_depth: int = -1
    ) -> int:
        with self._lock:
            scopes = self._stack()
            base = parent if parent >= 0 else (scopes[-1].node if scopes else 0)
            self._check("node", base, len(self._parent))
            here = sys._getframe()
            ids = self._python_ids(here, scopes[-1].user_depth if scopes else 0) if capture else []
            if parent < 0 and scopes and not ids:
                base = self._after_backward_function(scopes[-1], base)
            context = self.path(base, ids)
            node = self.path(context, frames)
            if user_depth == _INHERIT_USER_DEPTH:
                user_depth = scopes[-1].user_depth if scopes else 0
            elif user_depth < 0:
                user_depth = self._user_depth(here)
            inside = (
                bool(scopes)
                and ancestor(self._parent, self._depth, base, self._depth[scopes[-1].node])
                == scopes[-1].node
            )
            start = now_ns()
            self._settle_here(scopes)  # the outer scope's CPU time (or nobody's)
            if scopes:
                self._bill_between(scopes[-1], scopes, context, inside, start)
            scopes.append(
                Scope(
                    node,
                    start,
                    user_depth,
                    context,
                    inside,
                    last_ns=start,
                    last_context=node,
                    last_inside=True,
                )
            )
            return node

    def _after_backward_function(self, scope: Scope, base: int) -> int:
        """In the backward phase, a scope with no frames of its own goes where
        the function before it was, beside that function (not in it): as the
        engine's own operators go."""
        at = scope.last_context
        if not scope.last_inside or at == scope.node or not self._is_backward_phase(scope.node):
            return base
        kinds = self._frames["kind"]
        while at != scope.node and at > 0 and kinds[self._node_frame[at]] == KIND_OPERATOR:
            at = self._parent[at]
        return at

    def _is_backward_phase(self, node: int) -> bool:
        return self._parent[node] == 0 and self._node_frame[node] == self.intern(
            KIND_PHASE, "backward"
        )

    def _bill_between(
        self, scope: Scope, stack: Stack, context: int, inside: bool, start: int
    ) -> None:
        """Bill the Python time from the last thing recorded inside ``scope`` to
        ``start``, when the next one, opened at ``context``, starts (``stretch_node``);
        what the thread lent away is billed nowhere here."""
        between = start - scope.last_ns
        if between <= 0:
            return
        lent = take_lent(stack, scope.last_ns, start)
        scope.nested_ns += lent
        between -= lent
        at = stretch_node(self._parent, self._depth, scope, context, inside)
        if at >= 0 and between > 0:
            self._values[METRIC_CPU_TIME][at] += between
            scope.nested_ns += between

    def lend(self, thread: int, start_ns: int, end_ns: int) -> None:
        with self._lock:
            scopes = self._stacks.get(thread)
            if scopes is None or not scopes or end_ns <= start_ns:
                return
            if len(scopes.lent) >= MAX_LENT:  # bounded: the oldest go
                del scopes.lent[0]
            scopes.lent.append((start_ns, end_ns))

    def exit(self) -> int:
        return self._exit()[0]

    def exit_own(self) -> int:
        return self._exit()[1]

    def _exit(self) -> tuple[int, int]:
        """Close the innermost scope: (its inclusive ns, its exclusive ns), -1s with none."""
        end = now_ns()
        with self._lock:
            scopes = self._stack()
            if not scopes:
                return -1, -1
            self._settle_here(scopes)  # its CPU time since the last tick
            scope = scopes.pop()
            # its last stretch, after its last call
            self._bill_between(scope, scopes, -1, False, end)
            elapsed = end - scope.start_ns
            self._values[METRIC_COUNT][scope.node] += 1
            self._values[METRIC_CPU_TIME][scope.node] += elapsed - scope.nested_ns
            if scopes:
                outer = scopes[-1]
                outer.nested_ns += elapsed
                outer.last_ns, outer.last_context, outer.last_inside = (
                    end,
                    scope.context,
                    scope.inside,
                )
            return elapsed, elapsed - scope.nested_ns

    def top(self) -> int:
        scopes = self._stack()
        return scopes[-1].node if scopes else 0

    def depth(self) -> int:
        return len(self._stack())

    def unwind(self, depth: int) -> None:
        while self.depth() > max(depth, 0):
            self.exit()

    # --- CPU sampler ----------------------------------------------------
    def start_sampler(self, hz: float, native: bool = False) -> None:
        if not hz > 0:
            raise ValueError(f"hz must be > 0, got {hz}")
        if self.sampler_running():
            return
        self.stop_sampler()
        with self._lock:  # CPU time run while no sampler ran is billed to nobody
            for scopes in list(self._stacks.values()):
                scopes.cpu_ns = None
            self._sample_period_ns = max(1, int(1e9 / hz))
        self._sampler = Worker("deepcontext-sampler", 1.0 / hz, self._sample)
        self._sampler.start()

    def _sample(self) -> None:
        # As the native sampler: one sample per period of CPU time a thread ran
        # since the previous tick, at its innermost open scope; idle threads
        # (clock unmoved) and threads with no open scope get none. Unlike the
        # native one this thread needs the GIL, so it ticks only when the
        # interpreter lets it; CPU time still accrues meanwhile, and a thread
        # settles it itself where it opens or closes a scope (`_settle_here`).
        with self._lock:
            for scopes in list(self._stacks.values()):
                self._settle(scopes)

    def _settle(self, scopes: Stack) -> None:
        """Bill the CPU periods ``scopes``' thread ran since its last reading
        to its innermost scope (held lock)."""
        n = scopes.cpu_periods(self._sample_period_ns)
        if n:
            self._values[METRIC_SAMPLES][scopes[-1].node] += n

    def _settle_here(self, scopes: Stack) -> None:
        """`_settle`, from the thread itself where a scope opens or closes
        while the sampler runs: ticks that wait for the GIL would otherwise
        bill one scope's CPU time to the next, or to nobody. (Not without a
        per-thread clock: there each tick counts a sample, and so would this.)"""
        if self._sampler is not None and scopes.cpu_clock is not None:
            self._settle(scopes)

    def stop_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()  # joins: never call it holding the lock the tick takes
            with self._lock:
                self._drops["samples"] += sampler.missed

    def sampler_running(self) -> bool:
        return self._sampler is not None and self._sampler.running

    # --- system monitor ------------------------------------------------
    def start_monitor(self, interval_ms: int) -> None:
        self._monitor.start(interval_ms)

    def stop_monitor(self) -> None:
        self._monitor.stop()

    def monitor_samples(self) -> dict[str, list]:
        return self._monitor.samples()

    # --- output ---------------------------------------------------------
    def snapshot(self) -> dict:
        with self._lock:
            drops = {**self._drops, "monitor": self._monitor.dropped}
            if self._sampler is not None:
                drops["samples"] += self._sampler.missed
            out = {
                "parent": array("q", self._parent),
                "frame": array("q", self._node_frame),
                "metrics": {n: array("q", v) for n, v in zip(self._metric_names, self._values)},
                "units": dict(zip(self._metric_names, self._metric_units)),
                "frames": {column: array("q", values) for column, values in self._frames.items()},
                "strings": list(self._strings),
                "drops": drops,
            }
            if self._step_bounds.marked:
                out["step_bounds"] = self._step_bounds.snapshot(len(self._parent))
                out["steps_marked"] = self._step_bounds.marked
            return out

    def reset(self) -> None:
        self.stop_sampler()
        self.stop_monitor()
        with self._lock:
            del self._parent[1:]
            del self._depth[1:]
            del self._node_frame[1:]
            self._children.clear()
            self._mirrors.clear()
            for column in self._values:
                del column[1:]
                column[0] = 0
            self._step_bounds.clear()
            for scopes in list(self._stacks.values()):
                scopes.clear()
                scopes.lent.clear()
            self._drops = dict.fromkeys(self._drops, 0)
        self._monitor.clear()
