"""The JAX adapter: one ``jax.profiler`` trace per window, turned into the tree.

``install`` (window opens) waits for work dispatched before the window, starts
a trace into a private temporary directory, listens to JAX's compile events
and records Flax module classes. ``uninstall`` (window closes) waits for the
window's work, stops the trace, reads it back with ``jax.profiler.ProfileData``,
maps every executed HLO instruction to its context (``context.py``) and adds
its time and count to the collector's tree, before the session snapshots it.
``open``/``close`` span the profiler's life: Flax NNX module calls are named
in the name stack from the start (``nnx_hooks.py``), since a step is traced
once, usually before the first window.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from dc_core.collect.collector import (
    FLAG_BACKWARD,
    KIND_COMPILED,
    KIND_KERNEL,
    KIND_MODULE,
    KIND_OPERATOR,
    KIND_PHASE,
    KIND_PYTHON,
    METRIC_COUNT,
    METRIC_CPU_TIME,
)
from dc_core.collect.ownfiles import skip_framework_files
from dc_core.record.adapter import Adapter, WindowSkipped
from dc_jax import host, trace
from dc_jax.context import context_of, is_library
from dc_jax.flax_hooks import ModuleRecorder
from dc_jax.hlo import Instruction
from dc_jax.memory import MemoryWatch
from dc_jax.names import unwrapped
from dc_jax.nnx_hooks import NnxScopes
from dc_jax.programs import ModuleIndex

logger = logging.getLogger("deepcontext")

_COMPILE_STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "backend_compile",
}


def _barrier() -> None:
    """Wait until all dispatched work is done, so a window holds its own steps' ops."""
    import jax

    jax.effects_barrier()
    for array in jax.live_arrays():
        try:
            array.block_until_ready()
        except Exception:  # deleted or donated meanwhile
            pass


class JaxAdapter(Adapter):
    """Session adapter for JAX (the contract: ``dc_core.record.adapter.Adapter``)."""

    framework = "jax"

    def __init__(self, nnx: NnxScopes | None = None) -> None:
        """``nnx``: NNX module naming already started (``deepcontext run`` starts it
        while it looks for the step, which is traced before it is known)."""
        self._dir: str | None = None
        self._session: Any = None
        self._index = ModuleIndex()
        self._flax = ModuleRecorder()
        self._nnx = nnx or NnxScopes()
        self._compiles: list[tuple[str, str, float, float, int, tuple[int, ...]]] = []
        self._phases: list[tuple[str, int, int]] = []  # (name, start, end) in monotonic ns
        self._clock0 = (0, 0)  # (wall ns, monotonic ns) when the trace started
        self._warned_nnx = False
        self._step_spans: list[tuple[float, float]] = []  # compile spans since the last step ended
        self._marks: list[int] = []  # monotonic ns the window opened and each of its steps ended
        self._moved: list[
            tuple[int, int, int]
        ] = []  # host time moved after the steps: (node, step, ns)
        # (module, program)s with ops placed in the user's code
        self._located: set[tuple[str, int]] = set()
        self._memory = MemoryWatch()  # memory by context, in windows that ask for it
        self._modules: dict[str, str] = {}  # module path → class, of the ops placed so far
        self.last_trace_bytes = 0
        self.last_stop_ns = 0  # barrier + stop_trace (the trace's own export) of the last window
        self.last_convert_ns = 0  # reading the trace into the tree
        #: A directory to copy each window's raw ``*.xplane.pb`` into (TensorBoard's
        #: profile plugin reads it; tests check the tree against it); None: not kept.
        self.keep_traces: str | None = None

    # --- profiler lifetime ------------------------------------------------------
    def open(self) -> None:
        """The profiler started: name NNX module calls from now on (see ``nnx_hooks``).

        Unlike the per-window hooks this spans the profiler's life, because
        a step is usually traced (and its name stack fixed) before any window."""
        try:
            self._nnx.start()
        except Exception:  # without names NNX ops still get Python frames
            logger.warning("DeepContext: could not name Flax NNX modules", exc_info=True)
            self._nnx.stop()

    def close(self) -> None:
        """The profiler stopped: restore the NNX module classes."""
        self._nnx.stop()

    # --- the Adapter contract ---------------------------------------------------
    def install(self, session: Any) -> None:
        import jax

        self._session = session
        # JAX's own frames stay out of sampled call paths
        skip_framework_files(session.collector, "jax")
        _barrier()
        self._compiles, self._phases, self._step_spans, self._moved = [], [], [], []
        self._located = set()
        self._marks = [time.monotonic_ns()]
        self._index.clear()
        self._flax.classes.clear()
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # the collector's sampler covers Python, far cheaper
        directory = tempfile.mkdtemp(prefix="deepcontext-jax-")
        self._clock0 = _clock_pair()
        try:
            jax.profiler.start_trace(directory, profiler_options=options)
        except RuntimeError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            if "already been started" in str(exc):  # the user's own trace: theirs keeps running
                raise WindowSkipped(
                    "a jax.profiler trace of your own is running (one trace at a time)"
                ) from None
            raise
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._dir = directory  # from here on, uninstall has a trace to stop
        jax.monitoring.register_event_time_span_listener(self._on_compile)
        self._flax.start()
        self._nnx.refresh()
        if getattr(session.config, "collect_memory", False):
            self._memory.start(session.clock)

    def uninstall(self, session: Any) -> None:
        import jax

        directory, self._dir = self._dir, None  # a failure below must not stop the trace twice
        if directory is None:
            return
        self._flax.stop()
        _unregister(self._on_compile)
        try:
            started = time.perf_counter_ns()
            try:
                _barrier()
            finally:
                jax.profiler.stop_trace()
            self.last_stop_ns = time.perf_counter_ns() - started
            started = time.perf_counter_ns()
            self._ingest(session, directory)
            self.last_convert_ns = time.perf_counter_ns() - started
        except Exception as exc:  # keep the window's host data, disable profiling
            session.fail(exc, "jax trace conversion")
        finally:  # its nodes are made before the session snapshots the tree
            modules = {**self._modules, **self._nnx.classes, **self._flax.classes}
            self._memory.finish(session, modules)
            self._index.clear()
            shutil.rmtree(directory, ignore_errors=True)

    def environment(self) -> dict[str, str]:
        import jax
        import jaxlib

        env = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
        try:
            import flax

            env["flax"] = flax.__version__
        except ImportError:
            pass
        devices = jax.devices()
        env["backend"] = jax.default_backend()
        env["devices"] = ", ".join(sorted({d.device_kind for d in devices}))
        env["device_count"] = str(len(devices))
        env["process_index"] = str(jax.process_index())
        return env

    def memory_state(self) -> tuple[bool, str]:
        """Whether the window just closed read its live arrays, and what JAX does not give."""
        return self._memory.outcome()

    def memory_readout(self, collector: Any) -> dict[str, Any]:
        """The window's live arrays by context (``memory.py``), read as it closed."""
        return self._memory.result()

    def note_state(self, state: Any) -> None:
        """The train state after the step ending now (``Profiler.step(state)``): its
        leaves tell parameters and optimizer state apart in the window's memory."""
        self._memory.state(state)

    def step_overhead_ns(self) -> int:
        """Compile time inside the step just ended (the union of its compile
        spans: compiling a function traces the ones it calls inside its own
        span), kept out of the step's time; it is reported in ``compile``.
        With memory asked for, the live arrays are summed here (``memory.py``)."""
        self._memory.step_end()
        self._marks.append(time.monotonic_ns())
        spans, self._step_spans = sorted(self._step_spans), []
        total, end = 0.0, float("-inf")
        for start, stop in spans:
            if stop > end:
                total += stop - max(start, end)
                end = stop
        return int(total * 1e9)

    # --- phases the user marks -------------------------------------------------
    def mark(self, name: str, start_ns: int, end_ns: int) -> None:
        """Record that the host ran phase ``name`` from ``start_ns`` to ``end_ns`` (monotonic)."""
        if self._dir is not None:
            self._phases.append((name, start_ns, end_ns))

    # --- compile events -----------------------------------------------------------
    def _on_compile(self, event: str, start_time: float, end_time: float, **kwargs: Any) -> None:
        stage = _COMPILE_STAGES.get(event)
        if stage is None or self._session is None:
            return
        try:
            collector = self._session.collector
            name = str(kwargs.get("fun_name", "?"))
            inner = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
            self._compiles.append(
                (
                    stage,
                    _compiled_name(inner),
                    start_time,
                    end_time,
                    collector.top(),
                    tuple(collector.python_frames()),
                )
            )
            self._step_spans.append((start_time, end_time))
            if stage == "backend_compile":
                # The new program is alive now; a jit made anew each step is not
                # when the window closes, and its ops need its metadata.
                self._index.capture(trace.module_of(inner))
        except Exception as exc:  # a listener must never raise into JAX
            self._session.fail(exc, "jax compile listener")

    def _ingest_compiles(self, session: Any) -> None:
        """Compile time as its own phase, moved out of the step phase it ran in.

        Only outermost spans count: compiling a function traces the jitted
        functions it calls, whose spans lie inside its own."""
        c = session.collector
        spans = sorted(self._compiles, key=lambda s: (s[2], -s[3]))
        outer_end = float("-inf")
        compile_phase = session.frame(KIND_PHASE, "compile")
        for stage, name, start, end, scope, frames in spans:
            if end <= outer_end and stage == "trace":
                continue
            outer_end = max(outer_end, end)
            elapsed = int((end - start) * 1e9)
            node = c.path(
                0, [compile_phase, *frames, session.frame(KIND_COMPILED, name, detail=stage)]
            )
            c.add(node, METRIC_CPU_TIME, elapsed)
            c.add(node, METRIC_COUNT, 1)
            if scope > 0:
                c.add(scope, METRIC_CPU_TIME, -elapsed)

    # --- the trace ----------------------------------------------------------------
    def _ingest(self, session: Any, directory: str) -> None:
        from jax.profiler import ProfileData

        self._ingest_compiles(session)
        files = glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True)
        if not files:
            logger.warning(
                "DeepContext: jax.profiler wrote no trace; the window has host samples only"
            )
            return
        self.last_trace_bytes = sum(os.path.getsize(f) for f in files)
        if self.keep_traces is not None:
            os.makedirs(self.keep_traces, exist_ok=True)
            window = session.window or (0, 0)
            for i, path in enumerate(files):
                shutil.copy(
                    path,
                    os.path.join(self.keep_traces, f"steps-{window[0]}-{window[1]}-{i}.xplane.pb"),
                )
        for path in files:
            data = ProfileData.from_file(path)
            events, dispatches = trace.read(data)
            started = trace.profile_start_ns(data)
            phase_at = self._phase_lookup(started)
            launched = trace.launches(events, dispatches)
            placed = self._add_ops(session, trace.aggregate(events, dispatches, phase_at, launched))
            if started:
                self._place_host(session, dispatches, launched, placed, phase_at, started)

    def step_bound_shifts(self) -> dict[int, tuple[int, int]]:
        """How the window's host time moved after its steps were marked
        shifts each node's per-step bounds (see ``Session``)."""
        return host.bound_shifts(self._moved, len(self._marks) - 1)

    def _place_host(
        self,
        session: Any,
        dispatches: list[trace.Dispatch],
        launched: dict[tuple[str, int, int], int],
        placed: dict[tuple[str, int], list[tuple[int, ...]]],
        phase_at: Any,
        started_wall_ns: int,
    ) -> None:
        """Move the host time the trace locates from the phase it was timed in
        to the Python that spent it (``host.py``)."""
        c = session.collector
        wall0, mono0 = self._clock0
        shift = mono0 + (started_wall_ns - wall0)  # trace time t ↔ monotonic t + shift

        def host_phase_at(t: int) -> int:
            return session.phase_frame(
                (phase_at(t) if phase_at is not None else None) or session.default_phase
            )

        by_dispatch = {i: (module, program) for (module, program, _), i in launched.items()}
        by_name: dict[str, list[tuple[str, int]]] = {}
        for key in placed:
            by_name.setdefault(key[0], []).append(key)
        targets: dict[tuple[str, int], host.Target | None] = {}

        def target_of(i: int) -> host.Target | None:
            d = dispatches[i]
            key = by_dispatch.get(i)
            if key is None:
                named = by_name.get(d.module, [])
                if len(named) != 1:
                    return None
                key = named[0]
            if key not in targets:
                targets[key] = host.program_target(
                    placed.get(key, []), host_phase_at(d.start), key in self._located
                )
            return targets[key]

        compiles = [
            (int(start * 1e9) - started_wall_ns, int(end * 1e9) - started_wall_ns)
            for _, _, start, end, _, _ in self._compiles
        ]
        marks = [m - shift for m in self._marks]
        for move in host.moves(dispatches, target_of, host_phase_at, marks, compiles):
            node, timed = c.path(0, list(move.frames)), c.path(0, [move.host])
            c.add(node, METRIC_CPU_TIME, move.ns)
            c.add(timed, METRIC_CPU_TIME, -move.ns)
            self._moved += [(node, move.step, move.ns), (timed, move.step, -move.ns)]

    def _phase_lookup(self, trace_start_wall_ns: int) -> Any:
        if not self._phases or not trace_start_wall_ns:
            return None
        wall0, mono0 = self._clock0
        shift = mono0 + (trace_start_wall_ns - wall0)  # trace time t ↔ monotonic t + shift
        spans = sorted((s - shift, e - shift, name) for name, s, e in self._phases)

        def phase_at(t: int) -> str | None:
            found = None
            for start, end, name in spans:  # innermost (latest-starting) covering span wins
                if start > t:
                    break
                if t <= end:
                    found = name
            return found

        return phase_at

    def _add_ops(
        self, session: Any, ops: list[trace.OpTime]
    ) -> dict[tuple[str, int], list[tuple[int, ...]]]:
        """Add the ops' times to the tree; the frames each program's ops were placed at."""
        c = session.collector
        placed: dict[tuple[str, int], list[tuple[int, ...]]] = {}
        wanted: dict[tuple[str, int], set[str]] = {}
        for op in ops:
            wanted.setdefault((op.module, op.program), set()).add(op.hlo_op)
        modules = self._index.resolve(wanted)
        device_time = c.metric("device_time_ns", "ns")
        flops = c.metric("flops", "1")
        # (operator, device, program, instruction) → (flops of one run, runs): a
        # device runs its own shard's shapes; an op's kernels are one run of it
        flop_runs: dict[tuple[int, str, int, str], tuple[int, int]] = {}
        kernel_counts: dict[int, dict[int, int]] = {}  # operator node → kernel node → runs
        classes = {**self._nnx.classes, **self._flax.classes}
        for op in ops:
            instruction = modules.get((op.module, op.program), {}).get(op.hlo_op)
            if instruction is None:  # module no longer alive: the op keeps its name only
                instruction = Instruction(op.hlo_op, "", "", ())
            ctx = context_of(instruction, op.phase, classes)
            if not self._warned_nnx and _unnamed_nnx(instruction, ctx):
                self._warned_nnx = True
                logger.warning(
                    "DeepContext: Flax NNX ops of %s have no module frames: the step was compiled before the "
                    "profiler started (NNX modules are named while a step is traced); start dc_jax.profile "
                    "before the step's first call",
                    op.module,
                )
            frames = [session.frame(KIND_PHASE, ctx.phase)]
            for frame in ctx.frames:
                if frame[0] == "python":
                    frames.append(
                        session.frame(KIND_PYTHON, frame[1], frame[2], frame[3], detail=frame[4])
                    )
                else:
                    frames.append(session.frame(KIND_MODULE, frame[1], detail=frame[2]))
                    self._modules[frame[1]] = frame[2]
            if len(frames) == 1:  # nothing known about the source: name the compiled module
                frames.append(session.frame(KIND_COMPILED, op.module))
            flags = FLAG_BACKWARD if ctx.backward else 0
            frames.append(session.frame(KIND_OPERATOR, ctx.operator, detail=op.hlo_op, flags=flags))
            placed.setdefault((op.module, op.program), []).append(tuple(frames))
            if ctx.frames:
                self._located.add((op.module, op.program))
            operator = c.path(0, frames)
            kernel = c.child(operator, session.frame(KIND_KERNEL, op.kernel, detail=op.device))
            # XLA op time is the device's (the CPU device's thunks on the CPU
            # backend), never host time: the step's own wall time is that, and
            # summing both would count the same seconds twice.
            c.add(kernel, device_time, op.time_ns)
            runs = kernel_counts.setdefault(operator, {})
            runs[kernel] = runs.get(kernel, 0) + op.count
            if instruction.flops:
                key = (operator, op.device, op.program, op.hlo_op)
                flop_runs[key] = (instruction.flops, max(flop_runs.get(key, (0, 0))[1], op.count))
        for (operator, *_), (per_run, runs) in flop_runs.items():
            c.add(operator, flops, per_run * runs)
        for operator, runs in kernel_counts.items():
            # An op runs each of its kernels once: its executions are its busiest
            # kernel's, counted on the op alone so that inclusive counts are executions.
            c.add(operator, METRIC_COUNT, max(runs.values()))
        return placed


_NNX_DIR = os.sep + os.path.join("flax", "nnx", "nn") + os.sep


def _unnamed_nnx(instruction: Instruction, ctx: Any) -> bool:
    """An op an NNX layer made (its method is in the stack) whose name stack
    names no scope at all (not even the NNX scopes' root module): traced
    without the profiler's NNX scopes."""
    return not ctx.scoped and any(_NNX_DIR in loc.file for loc in instruction.stack)


#: Names JAX gives a compiled function that is a wrapper's, not the user's:
#: ``nnx.jit``'s inner function (``<unnamed function>``), ``pmap``'s (``_fun``).
_WRAPPER_NAMES = ("<unnamed function>", "_fun")


def _compiled_name(name: str) -> str:
    """``name``, or for a wrapper's inner function the qualified name of the
    function the user wrapped, where the outermost library frame of the
    compiling thread below the user's own frames holds it (``nnx.jit``'s
    ``JitWrapped.__call__``, in ``self.fun``); else ``name``."""
    if name not in _WRAPPER_NAMES:
        return name
    found = None
    frame = sys._getframe(2)  # 0: here, 1: the compile listener, then JAX
    for _ in range(200):
        if frame is None or not is_library(frame.f_code.co_filename):
            break
        local = frame.f_locals
        for held in (local.get("fun"), getattr(local.get("self"), "fun", None)):
            function = unwrapped(held) if callable(held) else None
            if function is not None and not str(getattr(function, "__module__", "")).startswith(
                ("jax", "flax")
            ):
                found = function.__qualname__  # the user's, not one of JAX's own wrappers
        frame = frame.f_back
    return found or name


def _unregister(listener: Any) -> None:
    import jax

    unregister = getattr(jax.monitoring, "unregister_event_time_span_listener", None)
    if unregister is not None:
        try:
            unregister(listener)
        except (ValueError, AssertionError):
            pass


def _clock_pair(tries: int = 5) -> tuple[int, int]:
    """(wall ns, monotonic ns) read at one instant: the phases' monotonic spans
    are placed on the trace's wall clock through this pair, and a phase can be
    microseconds long. Of a few reads, the one whose wall read sat between the
    closest monotonic reads wins (a thread preempted between two reads on a
    busy host would otherwise shift every phase by the preemption)."""
    best = (1 << 62, 0, 0)
    for _ in range(tries):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        if after - before < best[0]:
            best = (after - before, wall, (before + after) // 2)
    return best[1], best[2]
