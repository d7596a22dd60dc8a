"""The PyTorch adapter: what the session installs when a window opens.

Outside a window nothing of this is hooked. ``install`` registers the native
capture (a global ``RecordFunction`` callback that reports every ATen op and
autograd function on every thread, module frames read from the callers'
Python frames; see ``native.py``) or, where that extension is unavailable or
``capture="python"`` is asked for, pushes the operator mode (and, in
comprehensive mode, the ATen mode) on the training thread and registers the
module hooks. Phase hooks go in on both paths. ``uninstall`` removes them all
and ingests device activity. Every hook checks ``active`` first, so a failure
(``fail`` → ``session.fail``) turns the whole adapter into a pass-through at
once, even where a hook cannot be removed from inside itself.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

import torch

from dc_core.record.session import active_sessions

from dc_torch.autograd import AtenMode, BackwardRunner
from dc_torch.closure import ClosureHooks
from dc_torch.collectives import CollectiveHooks
from dc_torch.device import DeviceTracer, cuda_present
from dc_torch.modules import ModuleHooks
from dc_torch.native import BusyError, NativeCapture, load as load_native
from dc_torch.ops import OperatorMode
from dc_torch.phases import PhaseHooks
from dc_torch.state import Frames, ThreadState

TORCH_DIR = os.path.dirname(torch.__file__)
logger = logging.getLogger(__name__)


class TorchAdapter:
    """Hooks PyTorch for one session; see the module docstring."""

    framework = "torch"

    def __init__(self, device_activity: bool = True) -> None:
        self.session: Any = None
        self.collector: Any = None
        self.frames: Frames | None = None
        self.active = False
        self.generation = 0
        self.aten_forward = False
        self.device_activity = device_activity
        self.naming_root: Any = None  # module whose named_modules() names module frames (Lightning's)
        self.capture = "python"  # the path the last install took: "native" or "python"
        self.capture_note = ""  # why the Python path, or how the native one reads frames
        self.native: NativeCapture | None = None
        # Native path: the metrics read from op inputs/outputs ("flops": inputs,
        # "alloc_bytes": outputs too). None: ProfilerConfig.record_shapes says.
        self.shapes: frozenset[str] | None = None
        self.untagged: dict[str, Any] = {}
        self.suspended: set[int] = set()  # threads inside a compiled region: eager hooks stand aside
        self.matmul_frames: set[int] = set()
        self.on_uninstall: list[Any] = []  # callables run once when the window closes (e.g. kernel shims out)
        self._state = ThreadState()
        self._modes: list[Any] = []
        self._install_thread = 0
        self._backward_node = (-1, 0)
        self.backward = BackwardRunner(self)
        self.modules = ModuleHooks(self)
        self.phases = PhaseHooks(self)
        self.closures = ClosureHooks(self)  # after phases: its pre-hook runs second
        self.collectives = CollectiveHooks(self)
        self.device = DeviceTracer(self)
        self.metric_alloc = self.metric_flops = self.metric_device_time = -1
        self.cpu_shapes = False

    # --- session protocol -----------------------------------------------------
    def prepare(self, session: Any) -> None:
        """At session creation: build or load the capture extension and warm torch's
        tables, so that opening a window costs the first step almost nothing."""
        _warm_up()
        if getattr(session.config, "capture", "auto") != "python":
            load_native()

    def install(self, session: Any) -> None:
        """Hook torch for a window; on any error (or interrupt) part-way, what was
        hooked is unhooked again before the error leaves."""
        _register_fork_guard()
        _warm_up()
        if self.session is not session:
            self.session, self.frames = session, Frames(session)
        c = self.collector = session.collector
        c.skip_prefix(TORCH_DIR + os.sep)
        self.metric_alloc = c.metric("alloc_bytes", "bytes")
        # FLOPs and (on CPU) alloc_bytes are read from operator arguments, on
        # both capture paths, only where configured.
        self.cpu_shapes = session.config.shapes
        self.metric_flops = c.metric("flops", "1")
        self.metric_device_time = c.metric("device_time_ns", "ns")
        self.generation += 1
        self.aten_forward = session.config.mode == "comprehensive"
        self._install_thread = threading.get_ident()
        self.frames.naming_root = self.naming_root
        self.capture, self.capture_note = self._choose_capture(session)
        self.active = True
        try:
            self.device.start(self.device_activity)
            if self.capture == "native":
                self._start_native()
            for part in self._parts():
                part.install()
            if self.capture == "native":
                return
            self.modules.install()
            modes = [OperatorMode(self)]
            if self.aten_forward:
                modes.insert(0, AtenMode(self))  # dispatch mode below the function mode
            for mode in modes:
                self._modes.append(mode)  # first, so that an interrupt between the two is undone too
                mode.__enter__()
        except BaseException:
            self.uninstall(session)
            raise

    def uninstall(self, session: Any) -> bool:
        """Unhook torch and ingest device activity; safe to call again. Returns
        `restore`'s answer: False while a mode could not be taken off yet."""
        self.active = False
        try:
            failure = self._stop_native()
            restored = self.restore()
            if failure is not None:  # raised here, all unhooked: the session logs it once and turns off
                raise RuntimeError(f"the native operator capture stopped itself after an error in {failure}")
            return restored
        finally:
            closers, self.on_uninstall = self.on_uninstall, []
            try:
                for close in closers:
                    close()
            finally:
                self.device.stop()

    def restore(self) -> bool:
        """Take every hook and mode of ours out of torch, wherever they sit; idempotent.

        Returns False while one of our modes cannot be taken off yet: torch lifts
        a mode off its stack while the mode's own handler runs (a failure inside
        an operator lands here), and another thread's stacks are out of reach.
        The session calls this again from its next step boundary, where the
        mode is back on the stack."""
        errors = []
        for part in (*self._parts(), self.modules):
            try:
                part.uninstall()
            except Exception as exc:  # noqa: BLE001 - the others are still removed
                errors.append(exc)
        restored = self._remove_modes()
        if errors:
            raise errors[0]
        return restored

    def _parts(self) -> tuple[Any, ...]:
        """Hooks both capture paths install (module hooks are the Python path's)."""
        return (self.phases, self.closures, self.collectives)

    def environment(self) -> dict[str, str]:
        env = {"torch": torch.__version__, "torch.threads": str(torch.get_num_threads()),
               "capture": f"{self.capture} ({self.capture_note})" if self.capture_note else self.capture}
        if cuda_present():
            env["cuda"] = str(torch.version.cuda or torch.version.hip or "")
            env["devices"] = ", ".join(
                torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
            )
        return env

    # --- used by the hooks --------------------------------------------------------
    def modes(self) -> list[Any]:
        """This adapter's torch modes on the installing thread's stacks."""
        return list(self._modes)

    def thread_state(self) -> ThreadState:
        state = self._state
        if state.generation != self.generation:
            state.reset(self.generation)
        return state

    def backward_phase_node(self) -> int:
        generation, node = self._backward_node
        if generation != self.generation:
            node = self.collector.child(0, self.session.phase_frame("backward"))
            self._backward_node = (self.generation, node)
        return node

    def leave(self, marker: Any, where: str) -> None:
        """Close the scope a hook opened around the user's call (in its ``finally``):
        an error here is the profiler's and must not replace the user's result
        or exception."""
        try:
            if marker is not None:
                marker.__exit__(None, None, None)
            if self.active:
                self.collector.exit()
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            self.fail(exc, where)

    def fail(self, exc: BaseException, where: str) -> None:
        """Route an internal error to the session's fail-open path (which uninstalls us)."""
        self.active = False
        if self.session is not None:
            self.session.fail(exc, f"torch {where}")

    # --- internals ----------------------------------------------------------
    def _choose_capture(self, session: Any) -> tuple[str, str]:
        """("native", how frames are read) or ("python", why not native)."""
        wanted = getattr(session.config, "capture", "auto")
        if wanted == "python":
            return "python", "capture=python"
        if not hasattr(self.collector, "capture_api"):
            return "python", "the pure-Python collector has no native capture"
        extension, reason = load_native()
        if extension is None:
            return "python", reason
        if self.native is None:
            self.native = NativeCapture(extension)
        return "native", ""

    def _start_native(self) -> None:
        frames, collector = self.frames, self.collector

        def namer(module: Any, root: Any) -> int:
            # Runs inside an operator's callback: an error here is the
            # profiler's, so it goes to fail-open (which stops the capture).
            try:
                return frames.module(module, root)
            except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
                self.fail(exc, "module naming")
                return -1

        assert self.native is not None
        try:
            # On a GPU, Kineto's memory events give alloc_bytes (device.py).
            marks = self.device.on
            shapes = self._shapes()
            self.native.start(collector, self.session.phase_frame("backward"), self.aten_forward, namer,
                              flops=self.metric_flops if "flops" in shapes else -1,
                              alloc=self.metric_alloc if "alloc_bytes" in shapes and not marks else -1,
                              marks=marks)
        except BusyError:
            # Another session's window holds the process-wide callback (two
            # profilers at once): this one records on the Python path.
            self.capture, self.capture_note = "python", "another window holds the native capture"
            return
        self.capture_note = f"frames: {self.native.frame_walk}"

    def _shapes(self) -> frozenset[str]:
        """Which shape-derived metrics the native path takes: asking for any
        makes torch box every operator's inputs (and, for alloc_bytes, outputs),
        so by default only comprehensive windows do (``ProfilerConfig.record_shapes``)."""
        if self.shapes is not None:
            return self.shapes
        return frozenset({"flops", "alloc_bytes"} if self.cpu_shapes else ())

    def _stop_native(self) -> str | None:
        """Remove the callback; returns the error that stopped it mid-window, if one did."""
        native = self.native
        if native is None or native.collector is None:
            return None
        unpathed, errors = native.stop()
        if errors:
            logger.warning("deepcontext: %d module(s) could not be named; their operators sit under the caller", errors)
        if unpathed:
            logger.warning("deepcontext: %d operator(s) ran under a Python stack deeper than the walk "
                           "reads; they are recorded without their Python path", unpathed)
        return native.failure

    def _remove_modes(self) -> bool:
        """Take our modes off the installing thread's stacks, leaving others' modes
        in their order; those not on a stack now stay listed for the next try."""
        if not self._modes:
            return True
        if threading.get_ident() != self._install_thread:
            return False
        self._modes = [mode for mode in self._modes if not _take_off(mode)]
        return not self._modes

@functools.cache
def _warm_up() -> None:
    """Pay torch's one-off costs before the window's first step: naming the
    first operator builds torch's table of overridable functions (~10 ms),
    which would otherwise land on the user's first module."""
    from torch.overrides import resolve_name

    resolve_name(torch.add)


@functools.cache
def _register_fork_guard() -> None:
    """In a forked child (DataLoader workers), every adapter goes inert: the child
    inherits the parent's modes and hooks but must never record on its behalf."""
    os.register_at_fork(after_in_child=_inert_in_child)


def _inert_in_child() -> None:
    for session in active_sessions():
        adapter = getattr(session, "adapter", None)
        if isinstance(adapter, TorchAdapter):
            adapter.active = False
            try:
                adapter.restore()  # the child's copy of torch is left as it was before the window
            except Exception:  # noqa: BLE001 - inert is enough
                pass


def _take_off(mode: Any) -> bool:
    """Remove ``mode`` from this thread's function-mode or dispatch-mode stack,
    wherever it sits; False when it is not on the stack."""
    if isinstance(mode, OperatorMode):
        length, at = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
        pop, push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
    else:
        from torch.utils._python_dispatch import _pop_mode, _push_mode

        length, at, pop, push = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at, _pop_mode, _push_mode
    depth = length()
    index = next((i for i in range(depth - 1, -1, -1) if at(i) is mode), -1)
    if index < 0:
        return False
    if index == depth - 1:
        mode.__exit__(None, None, None)  # on top: the ordinary way out
        return True
    above = [pop() for _ in range(depth - 1 - index)]  # another's modes entered after ours
    pop()
    for other in reversed(above):
        push(other)
    return True
