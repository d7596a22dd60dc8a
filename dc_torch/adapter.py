"""The PyTorch adapter: what the session installs when a window opens.

Outside a window nothing of this is hooked. ``install`` registers the native
capture (a global ``RecordFunction`` callback that reports every ATen op and
autograd function on every thread, module frames read from the callers'
Python frames; see ``native.py``) or, where that extension is unavailable or
``capture="python"`` is asked for, pushes the operator mode (and, in
comprehensive mode, the ATen mode) on the training thread and registers the
module hooks. Phase hooks go in on both paths. ``uninstall`` removes them all
and ingests device activity. The hooks share one `Hub` (``hub.py``) and read
nothing else of the adapter's; every hook checks ``hub.active`` first, so a
failure (``hub.fail`` → ``session.fail``) turns the whole adapter into a
pass-through at once, even where a hook cannot be removed from inside itself.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.ownfiles import skip_framework_files
from dc_core.record.adapter import Adapter
from dc_core.record.session import active_sessions
from dc_torch.closure import ClosureHooks
from dc_torch.collectives import CollectiveHooks
from dc_torch.device import cuda_present
from dc_torch.fsdp_wrapper import WrapperShardingHooks
from dc_torch.hub import HookWindow, Hub
from dc_torch.memory import MemoryHooks
from dc_torch.modules import ModuleBoundaries, ModuleHooks
from dc_torch.native import NO_FRAME, NO_METRIC, BusyError, NativeCapture
from dc_torch.native import load as load_native
from dc_torch.ops import AtenMode, OperatorMode
from dc_torch.phases import PhaseHooks
from dc_torch.sharding import ShardingHooks
from dc_torch.zero import ZeroHooks

if TYPE_CHECKING:
    from dc_core.record.session import Session

TORCH_DIR = os.path.dirname(torch.__file__)
logger = logging.getLogger("deepcontext")


class TorchAdapter(Adapter):
    """Hooks PyTorch for one session; see the module docstring."""

    framework = "torch"

    def __init__(self, device_activity: bool = True) -> None:
        self.device_activity = device_activity
        self.naming_root: Any = (
            None  # module whose named_modules() names module frames (Lightning's)
        )
        # Native path: the metrics read from op inputs/outputs ("flops": inputs,
        # "alloc_bytes": outputs too). None: ProfilerConfig.record_shapes says.
        self.shapes: frozenset[str] | None = None
        self.hub: Hub | None = (
            None  # what the hooks share; made for the session at its first window
        )
        self._parts: tuple[
            PhaseHooks | ClosureHooks | CollectiveHooks | ShardingHooks, ...
        ] = ()  # both capture paths install these
        self._modules: ModuleHooks | None = None  # the Python path's
        self._bounds: ModuleBoundaries | None = None  # the native path's, in comprehensive windows
        self._memory: MemoryHooks | None = None  # memory by context, where asked for
        self._modes: list[OperatorMode | AtenMode] = []
        self._install_thread = 0

    @property
    def capture(self) -> str:
        """The operator capture the last window took: "native" or "python"."""
        return self.hub.window.capture if self.hub is not None else "python"

    @property
    def capture_note(self) -> str:
        """Why the last window took the Python path, or how the native one read frames."""
        return self.hub.window.note if self.hub is not None else ""

    # --- the Adapter contract ---------------------------------------------------
    def prepare(self, session: Session) -> None:
        """At session creation: build or load the capture extension and warm torch's
        tables, so that opening a window costs the first step almost nothing."""
        _warm_up()
        if getattr(session.config, "capture", "auto") != "python":
            load_native()

    def install(self, session: Session) -> None:
        """Hook torch for a window; on any error (or interrupt) part-way, what was
        hooked is unhooked again before the error leaves."""
        _register_fork_guard()
        _warm_up()
        hub = self._bind(session)
        c = hub.collector
        skip_framework_files(c, "torch", "deepspeed")
        # ATen ops under the torch call that ran them
        nested = session.config.mode == "comprehensive"
        capture, note = self._choose_capture(hub)
        # FLOPs and (on CPU) alloc_bytes are read from operator arguments, on
        # both capture paths, only where configured.
        hub.window = HookWindow(
            generation=hub.window.generation + 1,
            capture=capture,
            note=note,
            thread=threading.get_ident(),
            shapes=session.config.shapes,
            metric_alloc=c.metric("alloc_bytes", "bytes"),
            metric_flops=c.metric("flops", "1"),
            metric_device_time=c.metric("device_time_ns", "ns"),
        )
        hub.frames.naming_root = self.naming_root
        self._install_thread = threading.get_ident()
        hub.active = True
        try:
            # The allocators report to one slot per thread, which a Kineto
            # session takes too: a memory window on a device records memory
            # and leaves the device's activity to windows without memory.
            memory = _wants_memory(session) and capture == "native"
            hub.device.start(self.device_activity and not memory)
            if memory and self.device_activity and cuda_present():
                assert self._memory is not None
                self._memory.device_note = (
                    "device activity is not traced in memory windows (one allocator-reporting slot "
                    "per thread, which Kineto takes too)"
                )
            if capture == "native":
                self._start_native(hub, nested)
            if _wants_memory(session):
                assert self._memory is not None
                self._memory.install()
            for part in self._parts:
                part.install()
            if hub.window.capture == "native":
                if nested:
                    assert self._bounds is not None
                    self._bounds.install()
                return
            assert self._modules is not None
            self._modules.install()
            modes: list[OperatorMode | AtenMode] = [OperatorMode(hub)]
            if nested:
                modes.insert(0, AtenMode(hub))  # dispatch mode below the function mode
            for mode in modes:
                # first, so that an interrupt between the two is undone too
                self._modes.append(mode)
                mode.__enter__()
        except BaseException:
            self.uninstall(session)
            raise

    def uninstall(self, session: Session) -> bool:
        """Unhook torch and ingest device activity; safe to call again. Returns
        `restore`'s answer: False while a mode could not be taken off yet."""
        hub = self.hub
        if hub is None:  # failed before it was made: nothing of ours is in
            return self.restore()
        hub.active = False
        try:
            if self._memory is not None:
                self._memory.uninstall()  # its optimizer hooks may wait: restore() below
            failure = self._stop_native()
            restored = self.restore()
            # raised here, all unhooked: the session logs it once and turns off
            if failure is not None:
                raise RuntimeError(
                    f"the native operator capture stopped itself after an error in {failure}"
                )
            return restored
        finally:
            window = hub.window
            closers, window.on_close = window.on_close, []
            try:
                for close in closers:
                    close()
            finally:
                hub.device.stop()

    def restore(self) -> bool:
        """Take every hook and mode of ours out of torch, wherever they sit; idempotent.

        Returns False while one of our modes cannot be taken off yet: torch lifts
        a mode off its stack while the mode's own handler runs (a failure inside
        an operator lands here), and another thread's stacks are out of reach.
        The session calls this again from its next step boundary, where the
        mode is back on the stack."""
        errors = []
        waiting = False  # optimizer hooks that must wait until theirs is done (OptimizerHooks)
        for part in (
            (*self._parts, self._modules, self._bounds, self._memory)
            if self._modules is not None
            else ()
        ):
            try:
                undone = part.restore() if part is self._memory else part.uninstall()
                waiting |= undone is False
            except Exception as exc:  # the others are still removed
                errors.append(exc)
        restored = self._remove_modes() and not waiting
        if errors:
            raise errors[0]
        return restored

    def _bind(self, session: Session) -> Hub:
        """The hub for ``session`` and the hooks that share it, made at its first window."""
        hub = self.hub
        if hub is None or hub.session is not session:
            hub = self.hub = Hub(session)
            # the closure hook after the phase hooks: its optimizer pre-hook runs second
            phases = PhaseHooks(hub)
            self._parts = (
                phases,
                ClosureHooks(hub),
                CollectiveHooks(hub),
                ShardingHooks(hub),
                WrapperShardingHooks(hub),
                ZeroHooks(hub, phases),
            )
            self._modules = ModuleHooks(hub)
            self._bounds = ModuleBoundaries(hub)
            self._memory = MemoryHooks(hub)
            phases.batch_seen = self._memory.batch_seen  # a batch's blocks are `input`
        return hub

    def environment(self) -> dict[str, str]:
        env = {
            "torch": torch.__version__,
            "torch.threads": str(torch.get_num_threads()),
            "capture": f"{self.capture} ({self.capture_note})"
            if self.capture_note
            else self.capture,
        }
        for part in self._parts:
            if isinstance(part, (ShardingHooks, CollectiveHooks)):
                env.update(part.environment())
        if cuda_present():
            env["cuda"] = str(torch.version.cuda or torch.version.hip or "")
            env["devices"] = ", ".join(
                torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
            )
        return env

    def memory_state(self) -> tuple[bool, str]:
        """Whether the last window collected memory, and what it could not."""
        memory = self._memory
        if memory is None:
            return False, "no window has opened"
        if not memory.collected and self.capture != "native":
            return False, f"memory is read on the native capture path only ({self.capture_note})"
        return memory.collected, memory.note

    # --- internals ----------------------------------------------------------
    def _choose_capture(self, hub: Hub) -> tuple[str, str]:
        """("native", how frames are read) or ("python", why not native)."""
        wanted = getattr(hub.session.config, "capture", "auto")
        if wanted == "python":
            return "python", "capture=python"
        if not hasattr(hub.collector, "capture_api"):
            return "python", "the pure-Python collector has no native capture"
        extension, reason = load_native()
        if extension is None:
            return "python", reason
        if hub.native is None:
            hub.native = NativeCapture(extension)
        return "native", ""

    def _start_native(self, hub: Hub, nested: bool) -> None:
        frames, window, native = hub.frames, hub.window, hub.native

        def namer(module: Any, root: Any) -> int:
            # Runs inside an operator's callback: an error here is the
            # profiler's, so it goes to fail-open (which stops the capture).
            try:
                return frames.module(module, root)
            except Exception as exc:
                hub.fail(exc, "module naming")
                return NO_FRAME

        if "torch._dynamo" in sys.modules:
            # Dynamo's frame hook stays set while a compiled model's Python runs
            # between its graphs: a namer called from an operator there would be
            # traced by Dynamo (and its tracer fails on our caches).
            namer = torch._dynamo.disable(namer)
        assert native is not None
        try:
            # On a GPU, Kineto's memory events give alloc_bytes (device.py).
            marks = hub.device.on
            shapes = self._shapes(window)
            if _wants_memory(hub.session):
                # the allocator's reports give alloc_bytes: one source per fact
                shapes = shapes - {"alloc_bytes"}
            native.start(
                hub.collector,
                hub.session.phase_frame("backward"),
                nested,
                namer,
                flops=window.metric_flops if "flops" in shapes else NO_METRIC,
                alloc=window.metric_alloc if "alloc_bytes" in shapes and not marks else NO_METRIC,
                marks=marks,
                unscoped_frame=hub.session.phase_frame("other"),
            )
        except BusyError:
            # Another session's window holds the process-wide callback (two
            # profilers at once): this one records on the Python path.
            window.capture, window.note = "python", "another window holds the native capture"
            return
        window.note = f"frames: {native.frame_walk}"

    def _shapes(self, window: HookWindow) -> frozenset[str]:
        """Which shape-derived metrics the native path takes: asking for any
        makes torch box every operator's inputs (and, for alloc_bytes, outputs),
        so by default only comprehensive windows do (``ProfilerConfig.record_shapes``)."""
        if self.shapes is not None:
            return self.shapes
        return frozenset({"flops", "alloc_bytes"} if window.shapes else ())

    def _stop_native(self) -> str | None:
        """Remove the callback; returns the error that stopped it mid-window, if one did."""
        native = self.hub.native if self.hub is not None else None
        if native is None or native.collector is None:
            return None
        unpathed, errors = native.stop()
        if errors:
            logger.warning(
                "deepcontext: %d module(s) could not be named; their operators sit under the caller",
                errors,
            )
        if unpathed:
            logger.warning(
                "deepcontext: %d operator(s) ran under a Python stack deeper than the walk "
                "reads; they are recorded without their Python path",
                unpathed,
            )
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


def _wants_memory(session: Session) -> bool:
    return bool(getattr(session.config, "collect_memory", False))


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
            if adapter.hub is not None:
                adapter.hub.active = False
            try:
                adapter.restore()  # the child's copy of torch is left as it was before the window
            except Exception:  # inert is enough
                pass


def _take_off(mode: OperatorMode | AtenMode) -> bool:
    """Remove ``mode`` from this thread's function-mode or dispatch-mode stack,
    wherever it sits; False when it is not on the stack."""
    if isinstance(mode, OperatorMode):
        length, at = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
        pop, push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
    else:
        from torch.utils._python_dispatch import _pop_mode, _push_mode

        length, at, pop, push = (
            torch._C._len_torch_dispatch_stack,
            torch._C._get_dispatch_stack_at,
            _pop_mode,
            _push_mode,
        )
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
