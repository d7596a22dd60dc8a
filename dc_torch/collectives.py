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
communication that overlaps backward is visible too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import FLAG_BACKWARD
from dc_torch.hub import Interceptor
from dc_torch.native import NO_METRIC

if TYPE_CHECKING:
    from dc_torch.hub import Hub

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
_Work = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


class CollectiveHooks:
    """Registers and destroys the ``c10d`` op kernels for one adapter's hub."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.library: Any = None
        self.metric = NO_METRIC
        # No device marker of its own: a collective's kernels stay with the
        # marked operator around it, as they always have.
        self.scope = Interceptor(hub, "collective", capture=True, marks=False, after=self._launched)

    def install(self) -> None:
        if not _initialized():
            return
        self.metric = self.hub.collector.metric("comm_time_ns", "ns")
        library = torch.library.Library("c10d", "IMPL")
        for name in OPS:
            packet = getattr(torch.ops.c10d, name, None)
            if packet is not None and "default" in packet.overloads():
                library.impl(name, self._kernel(name, packet.default), "Autograd")
        self.library = library

    def uninstall(self) -> None:
        library, self.library = self.library, None
        if library is not None:
            library._destroy()

    def _kernel(self, name: str, op: Any) -> Callable:
        hub, scope = self.hub, self.scope
        fids: dict[int, int] = {}

        def below_autograd(*args: Any, **kwargs: Any) -> Any:
            with torch._C._AutoDispatchBelowAutograd():
                return op(*args, **kwargs)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            if not hub.active:
                return below_autograd(*args, **kwargs)
            try:
                flags = FLAG_BACKWARD if _current_node() is not None else 0
                fid = fids.get(flags)
                if fid is None:
                    fid = fids[flags] = hub.frames.op(f"c10d::{name}", flags)
            except Exception as exc:
                hub.fail(exc, "collective")
                return below_autograd(*args, **kwargs)
            # comm_time_ns starts where the scope's cpu_time_ns does
            return scope.call((fid,), below_autograd, args, kwargs, time.monotonic_ns())

        return kernel

    def _launched(
        self, node: int, frames: tuple, start: int, args: tuple, kwargs: dict, out: Any
    ) -> None:
        self._on_completion(out, node, start)

    def _on_completion(self, out: Any, node: int, start: int) -> None:
        work = out[-1] if isinstance(out, tuple) and out else out
        if isinstance(work, torch.ScriptObject):  # the dispatcher hands back the boxed Work
            work = _Work.unbox(work)
        get_future = getattr(work, "get_future", None)
        if get_future is None:
            return
        hub, metric, window = self.hub, self.metric, self.hub.window

        def done(_future: Any) -> None:  # on the backend's thread, with the GIL
            if hub.active and hub.window is window:  # the window that launched it is still open
                hub.collector.add(node, metric, time.monotonic_ns() - start)

        try:
            get_future().then(done)
        except Exception:  # a backend without futures: the launch time stays
            pass
