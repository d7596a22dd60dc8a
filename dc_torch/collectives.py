"""Collectives as operators: ``all_reduce``, ``broadcast``, DDP's bucketed all-reduce.

Every c10d collective, whether called from Python (``dist.all_reduce``) or
from C++ (DDP's reducer during backward), passes through the dispatcher as a
``c10d::`` op. While a window is open a Python kernel registered at the
``Autograd`` key of those ops (a ``torch.library`` registration, destroyed
when the window closes) opens an operator scope under the current context —
the backward pass of the step for DDP's buckets, flagged ``backward`` — and
redispatches below autograd to the real kernel. Other ops pay nothing.

``cpu_time_ns`` is the call (the launch, for an asynchronous collective);
``comm_time_ns`` is launch to completion, taken from the work's future, so
communication that overlaps backward is visible too. Where the native
extension is loaded, a C++ callback on the future reads the clock on the
backend's thread (`dc_torch.completion`) and the time is billed when the work is
waited for, forgotten or the window closes; a Python callback would take the
GIL there, cost the step the hand-over and read the clock when the GIL came,
up to a switch interval late. A collective a ``dist.*`` call waits for before
it returns (``async_op=False``) completes where that wait ends: no callback
at all. ``comm_bytes`` the
tensors it moves (its largest argument: an all-gather's output, a
reduce-scatter's input, an all-reduce's tensor). ``exposed_comm_ns`` is the
part of that the issuing thread could not overlap with anything else: the call
itself (a backend may run the collective there) and the time it waited in the
work's ``wait()`` (called by ``dist.*`` itself for a synchronous collective),
billed to the collective that work came from. Where the collective's
completion is known, a call counts up to it (a call that returns after its
collective completed spent the rest launching, not communicating) and a wait
that began after it counts for nothing. A work without a future is timed to
the end of its wait. A collective launched in one sharding scope and waited
for in another's (a prefetch, waited for by the module it gathers for) has
its wait timed as a scope of its own where the thread waits, a node of the
collective's name whose detail is `WAITED`: the module that waited paid it.

DDP's reducer issues a bucket's all-reduce from C++, in the gradient hook of
the bucket's last parameter (itself, or through a Python communication hook
registered with ``register_comm_hook``, which it hands the bucket): it lands
where that gradient's function ran, under the module whose gradients
completed the bucket. It waits for its buckets (or the hook's futures) in
C++ too, in a callback autograd's engine runs when the pass ends, where no
``Work.wait`` of Python's is called. For a pass on CPU tensors in
which such code issued collectives, a callback of ours queued ahead of the
reducer's opens a scope where the pass ended (a node of the collective's
name whose detail is `END_OF_BACKWARD`) and one queued from it, behind the
reducer's, closes it: its own time, less the operators inside (the copies
into the gradients), is that pass's exposed communication.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from dc_core.collect.collector import FLAG_BACKWARD, INHERIT, INNERMOST
from dc_core.collect.ownfiles import cut_own_frames
from dc_core.model.comm import END_OF_BACKWARD, WAITED
from dc_torch import ddp
from dc_torch.collective_calls import (
    exposed,
    issued_by_the_pass,
    moved_bytes,
    on_cpu,
    tensor_positions,
    waited_at_once,
)
from dc_torch.completion import CompletionClock
from dc_torch.hub import Interceptor
from dc_torch.native import NO_METRIC

if TYPE_CHECKING:
    from dc_torch.hub import Hub

logger = logging.getLogger("deepcontext")

OPS = (
    "allreduce_",
    "allreduce_coalesced_",
    "broadcast_",
    "allgather_",
    "_allgather_base_",
    "allgather_into_tensor_coalesced_",
    "reduce_scatter_",
    "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_",
    "reduce_",
    "gather_",
    "scatter_",
    "alltoall_",
    "alltoall_base_",
    "barrier",
    "send",
    "recv_",
)
_current_node = torch._C._current_autograd_node
_task_id = torch._C._current_graph_task_id
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback
_Work = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


#: Works launched and not yet waited on, kept to bill a wait to its collective:
#: at most this many (a work nobody waits on is forgotten with the oldest).
PENDING = 256


class _Launch(NamedTuple):
    """A collective's launch, kept until its work is waited for."""

    node: int  # its collective's node
    start: int  # launch ns
    timed: bool  # whether a Python callback on its future times its completion
    group: Any  # the sharding group whose scope launched it, None outside one
    name: str  # its operator's name
    clocked: int = -1  # its number on the `CompletionClock` (-1: not on it)
    called: int = 0  # ns its call returned


class CollectiveHooks:
    """Registers and destroys the ``c10d`` op kernels for one adapter's hub, and
    times waits on their works."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.library: Any = None
        self.metric = NO_METRIC
        self.metric_bytes = NO_METRIC
        self.metric_exposed = NO_METRIC
        self.pending: OrderedDict[Any, _Launch] = OrderedDict()  # by work
        self._waited_fids: dict[tuple[str, int], int] = {}
        self._wait: Any = None  # Work.wait as it was, while ours stands in
        self.clock: CompletionClock | None = None  # the native one, once made
        self._clock_tried = False
        self._ended_task = -1  # the last pass whose end wait is timed (`_issued_in_pass`)
        # No device marker of its own: a collective's kernels stay with the
        # marked operator around it, as they always have.
        # The work a backend runs on threads of its own (gloo's worker copying
        # a gathered tensor into place) records under the collective.
        self.scope = Interceptor(
            hub, "collective", capture=True, marks=False, after=self._launched, serves=True
        )
        # inside a sharding runtime's scope (dc_torch.sharding): right under it
        self.inside = Interceptor(
            hub, "collective", user_depth=INHERIT, marks=False, after=self._launched, serves=True
        )
        # a wait in another sharding group's scope than its launch's: right there
        self.waiting = Interceptor(
            hub, "collective wait", user_depth=INHERIT, marks=False, after=self._waited_here
        )

    def install(self) -> None:
        if not _initialized():
            return
        collector = self.hub.collector
        self.metric = collector.metric("comm_time_ns", "ns")
        self.metric_bytes = collector.metric("comm_bytes", "bytes")
        self.metric_exposed = collector.metric("exposed_comm_ns", "ns")
        self.pending.clear()
        self._waited_fids = {}
        self._ended_task = -1
        native = self.hub.native
        if not self._clock_tried and native is not None and self.hub.window.capture == "native":
            self._clock_tried = True  # once: a failure is said once
            try:
                self.clock = CompletionClock(native.extension)
            except Exception as exc:  # its operator would not register: Python callbacks time it
                logger.warning(
                    "deepcontext: collectives' completion is timed from Python (%s: %s)",
                    type(exc).__name__,
                    exc,
                )
        if _Work is not None and self._wait is None:
            self._wait = _Work.wait
            _Work.wait = self._timed_wait(self._wait)
        library = torch.library.Library("c10d", "IMPL")
        for name in OPS:
            packet = getattr(torch.ops.c10d, name, None)
            if packet is not None and "default" in packet.overloads():
                library.impl(name, self._kernel(name, packet.default), "Autograd")
        self.library = library

    def uninstall(self) -> None:
        library, self.library = self.library, None
        wait, self._wait = self._wait, None
        if wait is not None:
            _Work.wait = wait
        pending, self.pending = self.pending, OrderedDict()
        if library is not None:
            library._destroy()
        for launch in pending.values():  # nobody waited for them here (DDP's buckets)
            self._completed(launch, None)

    def environment(self) -> dict[str, str]:
        """The profile's ``ddp`` entry (`dc_torch.ddp.environment`)."""
        return ddp.environment(self.hub.frames)

    def _timed_wait(self, original: Callable) -> Callable:
        hub = self.hub

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            if not hub.active:
                return original(work, *args, **kwargs)
            try:
                fid = self._elsewhere(work)
            except Exception as exc:
                hub.fail(exc, "collective wait")
                fid = None
            if fid is not None:
                launch = self.pending.pop(work)
                note = (time.monotonic_ns(), launch)
                return self.waiting.call((fid,), original, (work, *args), kwargs, note)
            start = time.monotonic_ns()
            try:
                return original(work, *args, **kwargs)
            except BaseException as exc:  # the user's, as without us
                cut_own_frames(exc)
                raise
            finally:
                try:
                    if hub.active:
                        self._waited(work, start, time.monotonic_ns())
                except Exception as exc:
                    hub.fail(exc, "collective wait")

        wait.__wrapped__ = original  # type: ignore[attr-defined]
        return wait

    def _waited(self, work: Any, start: int, end: int) -> None:
        """The calling thread waited on ``work`` from ``start`` to ``end``:
        exposed communication of the collective it came from (else of the
        scope the thread is in)."""
        collector = self.hub.collector
        launch = self.pending.pop(work, None)
        if launch is None:
            collector.add(collector.top(), self.metric_exposed, end - start)
            return
        self._completed(launch, end, (start, end))

    def _completed(
        self, launch: _Launch, now: int | None, wait: tuple[int, int] = (0, 0), at: int = -1
    ) -> None:
        """Bill ``launch``: its launch-to-completion to its collective's
        ``comm_time_ns`` (completion as its clock says, else ``now``, the end of
        a wait for it; with neither, or where its future's callback bills it,
        nothing), and what its call and ``wait`` (start, end ns) exposed of it
        (`collective_calls.exposed`) to ``exposed_comm_ns``: the wait's to node ``at`` (-1: the
        collective's)."""
        done, collector = 0, self.hub.collector
        if not launch.timed:
            clocked = self.clock.completed_at(launch.clocked) if launch.clocked >= 0 else 0
            done = clocked or now or 0
            if done:
                collector.add(launch.node, self.metric, done - launch.start)
        call, waited = exposed(done, (launch.start, launch.called), wait)
        if at < 0:
            collector.add(launch.node, self.metric_exposed, call + waited)
        else:
            collector.add(launch.node, self.metric_exposed, call)
            collector.add(at, self.metric_exposed, waited)

    def _elsewhere(self, work: Any) -> int | None:
        """The frame of a wait for ``work`` where the thread stands, when that is
        in another sharding group's scope than its launch (else None)."""
        launch = self.pending.get(work)
        if launch is None or launch.group is None:
            return None
        running = self.hub.thread_state().sharding
        if not running or running[-1] is launch.group:
            return None
        flags = FLAG_BACKWARD if _current_node() is not None else 0
        fid = self._waited_fids.get((launch.name, flags))
        if fid is None:
            fid = self._waited_fids[launch.name, flags] = self.hub.frames.op(
                launch.name, flags, WAITED
            )
        return fid

    def _waited_here(
        self, node: int, frames: tuple, note: tuple, args: tuple, kwargs: dict, out: Any
    ) -> None:
        start, launch = note
        now = time.monotonic_ns()
        self._completed(launch, now, (start, now), node)

    def _kernel(self, name: str, op: Any) -> Callable:
        hub, scope, inside = self.hub, self.scope, self.inside
        fids: dict[int, int] = {}
        positions = tensor_positions(op)

        # The overload's C++ entry: its Python __call__ first looks through
        # every argument for a fake ScriptObject (a torch.compile trace's),
        # which the C++ dispatcher that called this kernel cannot hand it.
        raw = getattr(op, "_op", op)

        def below_autograd(*args: Any, **kwargs: Any) -> Any:
            # No __torch_function__ is looked for: a c10d op comes from C++,
            # which looks for none, and looking asks each ScriptObject argument
            # (the process group, the reduce op) for the attribute, a C++
            # exception each: 35 us of a bare redispatching kernel's 60 us.
            with torch._C._AutoDispatchBelowAutograd(), torch._C.DisableTorchFunction():
                return raw(*args, **kwargs)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            if not hub.active:
                return below_autograd(*args, **kwargs)
            try:
                flags = FLAG_BACKWARD if _current_node() is not None else 0
                fid = fids.get(flags)
                if fid is None:
                    fid = fids[flags] = hub.frames.op(f"c10d::{name}", flags)
                running = hub.thread_state().sharding
                site, group = (inside, running[-1]) if running else (scope, None)
                parent = INNERMOST
                # (on an autograd device thread no Python frame is below)
                caller = sys._getframe().f_back
                if caller is not None and flags and not running and issued_by_the_pass(caller):
                    parent = self._issued_in_pass(f"c10d::{name}", args)
                at_once = waited_at_once(caller)
            except Exception as exc:
                hub.fail(exc, "collective")
                return below_autograd(*args, **kwargs)
            # comm_time_ns starts where the scope's cpu_time_ns does
            launch = (time.monotonic_ns(), group, f"c10d::{name}", at_once, positions)
            return site.call((fid,), below_autograd, args, kwargs, launch, parent)

        return kernel

    def _launched(
        self, node: int, frames: tuple, launch: tuple, args: tuple, kwargs: dict, out: Any
    ) -> None:
        collector = self.hub.collector
        start, group, name, at_once, positions = launch
        called = time.monotonic_ns()
        collector.add(node, self.metric_bytes, moved_bytes(args, positions))
        if not self._on_completion(out, node, start, called, group, name, at_once):
            collector.add(node, self.metric_exposed, called - start)  # the call

    def _on_completion(
        self, out: Any, node: int, start: int, called: int, group: Any, name: str, at_once: bool
    ) -> bool:
        """Keep the work to bill its call and wait to the collective; time its
        completion by its future, unless it is waited for ``at_once`` (then the
        wait's end is its completion, and a callback on another thread would
        cost the step more than the collective's own Python). False where
        there is no work to keep."""
        work = out[-1] if isinstance(out, tuple) and out else out
        if isinstance(work, torch.ScriptObject):  # the dispatcher hands back the boxed Work
            work = _Work.unbox(work)
        clocked, timed = -1, False
        if not at_once:
            if self.clock is not None:
                clocked = self.clock.arm(work)
            else:
                timed = self._time_completion(work, node, start)
        if _Work is not None and isinstance(work, _Work):
            # the same object dist.* hands its caller while we hold it
            pending = self.pending
            pending[work] = _Launch(node, start, timed, group, name, clocked, called)
            if len(pending) > PENDING:
                self._completed(pending.popitem(last=False)[1], None)
            return True
        return False

    def _time_completion(self, work: Any, node: int, start: int) -> bool:
        """Add launch-to-completion to ``comm_time_ns`` when the work's future
        completes, from a Python callback (without the native extension);
        False where the work has no future to say when."""
        get_future = getattr(work, "get_future", None)
        if get_future is None:
            return False
        hub, metric, window = self.hub, self.metric, self.hub.window

        def done(_future: Any) -> None:  # on the backend's thread, with the GIL
            if hub.active and hub.window is window:  # the window that launched it is still open
                hub.collector.add(node, metric, time.monotonic_ns() - start)

        try:
            get_future().then(done)
        except Exception:  # a backend without futures: timed at its wait
            return False
        return True

    # --- the end of a pass: what C++ issued in it and waits for there (DDP) ---
    def _issued_in_pass(self, name: str, args: tuple) -> int:
        """A collective C++ issued during a backward pass (DDP's reducer), in a
        gradient's hook once its function has run: where it goes (beside that
        function, as the native capture places it; on the Python path the
        function's scope is still open). On CPU tensors, where the reducer's
        wait at the pass's end blocks this thread, that wait is timed, once
        per pass."""
        hub = self.hub
        task, parent = _task_id(), INNERMOST
        passes = hub.thread_state().passes  # the Python path's functions' scopes (autograd.py)
        if passes and passes[-1][0] == task and hub.collector.depth() > passes[-1][1]:
            parent = hub.collector.parent(hub.collector.top())
        if task == self._ended_task or not on_cpu(args):
            return parent
        self._ended_task = task
        fid = self.hub.frames.op(name, FLAG_BACKWARD, END_OF_BACKWARD)
        _queue_callback(lambda: self._end_wait_begins(fid))
        return parent

    def _end_wait_begins(self, fid: int) -> None:
        """First of the pass's callbacks queued after ours (the reducer's
        wait): a scope opens where the pass ended, and a callback queued now,
        behind them, closes it. An error here is the profiler's, never the pass's."""
        hub = self.hub
        if not hub.active:
            return
        try:
            collector = hub.collector
            depth = collector.depth()
            node = collector.enter((fid,), INNERMOST, False, INHERIT)
            _queue_callback(lambda: self._end_wait_ends(node, depth))
        except Exception as exc:
            hub.fail(exc, "collective wait")

    def _end_wait_ends(self, node: int, depth: int) -> None:
        hub = self.hub
        if not hub.active:
            return
        try:
            collector = hub.collector
            if collector.depth() != depth + 1:  # closed already (the phase ended)
                return
            collector.add(node, self.metric_exposed, max(collector.exit_own(), 0))
        except Exception as exc:
            hub.fail(exc, "collective wait")
