"""What the PyTorch adapter's hooks share: the hub, its window, and the one interceptor.

Every hook object of an adapter (operator modes, module and phase hooks, the
backward hooks, the device tracer, compiled regions and kernel shims) is
handed the adapter's `Hub`: the session, its collector and frame caches, the
services one hook asks of another (the device tracer's markers, the backward
runner), ``active`` and the fail-open path. What belongs to one window lives
in `HookWindow`, made afresh when a window opens, so nothing of a closed window
(its metric ids, its compiled-region threads, its backward node, its
cleanups) is read in the next by mistake.

`Interceptor` is the one place that wraps a user's call in a collector scope
and keeps the failure policy: the call runs exactly once, outside every
``except`` of ours, so its result and its exception are the user's; an error
of the profiler's own goes to ``Hub.fail`` (logged once, the profiler turns
itself off) and the user's call is run, or returned, as without the profiler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dc_core.collect.collector import INNERMOST, MEASURE
from dc_core.collect.ownfiles import cut_own_frames
from dc_torch.autograd import BackwardRunner
from dc_torch.device import DeviceTracer
from dc_torch.native import NO_METRIC
from dc_torch.state import Frames, ThreadState

if TYPE_CHECKING:
    from dc_core._native import Collector
    from dc_core.record.session import Session
    from dc_torch.native import NativeCapture

#: ``after(node, frames, note, args, kwargs, out)``: what an interceptor
#: records once the user's call has returned.
After = Callable[[int, Any, Any, tuple, dict, Any], None]


@dataclass(eq=False)
class HookWindow:
    """What the hooks read of the window open now; `TorchAdapter.install` makes a new one per window."""

    generation: int = 0  # counts windows: marks and per-thread state made in another are stale
    capture: str = "python"  # the operator capture this window took: "native" or "python"
    thread: int = (
        0  # the thread it was opened on: the Python path's operator modes are that thread's
    )
    note: str = ""  # why the Python path, or how the native one reads frames
    shapes: bool = False  # FLOPs and (on CPU) alloc_bytes are read from operator arguments
    metric_alloc: int = NO_METRIC
    metric_flops: int = NO_METRIC
    metric_device_time: int = NO_METRIC
    # threads inside a compiled region: eager hooks stand aside
    suspended: set[int] = field(default_factory=set)
    # run once when it closes (kernel shims out)
    on_close: list[Callable[[], None]] = field(default_factory=list)
    backward_node: int | None = None  # the backward phase's node, made on first use


class Hub:
    """What every hook of one adapter shares; made for a session at its first window."""

    session: Session
    collector: Collector
    frames: Frames
    device: DeviceTracer
    backward: BackwardRunner
    native: NativeCapture | None  # the native capture, once the extension has loaded
    active: bool  # installed and not failed: every hook checks it first
    window: HookWindow

    def __init__(self, session: Session) -> None:
        self.session = session
        self.collector = session.collector
        self.frames = Frames(session)
        self.device = DeviceTracer(self)
        self.backward = BackwardRunner(self)
        self.native = None
        self.active = False
        self.window = HookWindow()
        self._state = ThreadState()

    def thread_state(self) -> ThreadState:
        """The calling thread's state, fresh in each window."""
        state, generation = self._state, self.window.generation
        if state.generation != generation:
            state.reset(generation)
        return state

    def backward_root(self) -> int:
        """This window's backward phase node, under which backward operators mirror their forward context."""
        window = self.window
        if window.backward_node is None:
            window.backward_node = self.collector.child(0, self.session.phase_frame("backward"))
        return window.backward_node

    def unscoped_node(self) -> int:
        """The phase node where a thread in no scope records (``other``)."""
        return self.collector.child(0, self.session.phase_frame("other"))

    def fail(self, exc: BaseException, where: str) -> None:
        """Route an internal error to the session's fail-open path (which uninstalls the adapter)."""
        self.active = False
        self.session.fail(exc, f"torch {where}")


class Interceptor:
    """Runs a user's call as a collector scope: enter → mark → run → exit → ``after``.

    One per interception site (an operator mode, a kernel shim, a collective
    kernel, a compiled region), fixing how its scopes enter: ``capture``
    inserts the caller's Python frames, ``user_depth`` as for
    ``collector.enter``, ``marks`` opens the device tracer's marker so that
    Kineto places the call's kernels under the scope. ``after`` records what
    the call returned (FLOPs, bytes, autograd marks); its errors are the
    profiler's too. ``serves``: the call's work that its backend runs on
    threads of its own (a gloo collective's) records under the call's node
    (native capture only; `capture.cc`'s ``serving_call``).

    ``call(frames, func, args, kwargs, note=None, parent=INNERMOST)`` runs
    ``func(*args, **kwargs)`` in a scope at ``frames`` under ``parent`` (the
    innermost open scope by default) and hands ``note`` to ``after`` as it is.
    On the native capture path a ``capture`` site's scope of one frame opens
    where the caller stands as an operator would (``region_enter``): the
    native frame walk names the modules the caller runs in, which a scope's
    own walk of Python frames does not; where the capture records nothing
    (suspended in a compiled region) it opens as a scope after all.
    It is a closure over the site's settings: it runs for every intercepted
    call, and cells read faster than attributes.
    """

    __slots__ = ("hub", "call")

    def __init__(
        self,
        hub: Hub,
        where: str,
        *,
        capture: bool = False,
        user_depth: int = MEASURE,
        marks: bool = True,
        after: After | None = None,
        serves: bool = False,
    ) -> None:
        self.hub = hub
        self.call = _interceptor(hub, where, capture, user_depth, marks, after, serves)


def _interceptor(
    hub: Hub,
    where: str,
    capture: bool,
    user_depth: int,
    marks: bool,
    after: After | None,
    serves: bool,
) -> Callable[..., Any]:
    collector, device, fail = hub.collector, hub.device, hub.fail
    enter, exit_scope, depth = collector.enter, collector.exit, collector.depth

    def call(
        frames: Any,
        func: Callable,
        args: tuple,
        kwargs: dict,
        note: Any = None,
        parent: int = INNERMOST,
    ) -> Any:
        region = None  # the native extension, while a region of it is open
        serving = None  # the native extension's serving_call, for a serving site
        try:
            native = hub.window.capture == "native"
            node = -1
            if capture and native and parent == INNERMOST and len(frames) == 1:
                extension = hub.native.extension
                node = extension.region_enter(frames[0])
                if node >= 0:
                    region = extension
                else:  # not recorded here: its slot closes, a scope opens
                    extension.region_exit()
            if region is None:
                # A thread in no scope (not the steps'): with its operators in
                # the unscoped phase, which the native capture finds by itself.
                if parent == INNERMOST and not native and not depth():
                    parent = hub.unscoped_node()
                # Positional on purpose: pybind11 matching keywords cost ~100 ns a call here.
                node = enter(frames, parent, capture, user_depth)
            marker = device.mark(node) if marks and device.on else None
            if serves and native and node >= 0:
                serving = hub.native.extension.serving_call
        except Exception as exc:
            fail(exc, where)
            node = None
            if region is not None:
                try:
                    region.region_exit()
                except Exception:  # the failure is logged once, above
                    pass
        # outside the handler: the user's exception gets no profiler error as its context
        if node is None:
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs) if serving is None else serving(node, func, args, kwargs)
        except BaseException as exc:  # the user's, with the traceback it has without us
            cut_own_frames(exc)
            raise
        finally:
            # Here an error is the profiler's and must not replace the user's
            # result or exception.
            try:
                if marker is not None:
                    marker.__exit__(None, None, None)
                if region is not None:  # closes its slot, as every region_enter's
                    region.region_exit()
                elif hub.active:  # after a failure the session has unwound the scopes
                    exit_scope()
            except Exception as exc:
                fail(exc, where)
        if after is not None and hub.active:
            try:
                after(node, frames, note, args, kwargs, out)
            except Exception as exc:
                fail(exc, where)
        return out

    return call
