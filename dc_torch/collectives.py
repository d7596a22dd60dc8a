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
from typing import Any

import torch

from dc_core.collect.collector import FLAG_BACKWARD

OPS = ("allreduce_", "allreduce_coalesced_", "broadcast_", "allgather_", "_allgather_base_",
       "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
       "reduce_scatter_tensor_coalesced_", "reduce_", "gather_", "scatter_", "alltoall_", "alltoall_base_",
       "barrier", "send", "recv_")
_current_node = torch._C._current_autograd_node
_Work = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


class CollectiveHooks:
    """Registers and destroys the ``c10d`` op kernels for one adapter."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.library: Any = None
        self.metric = -1

    def install(self) -> None:
        if not _initialized():
            return
        self.metric = self.adapter.collector.metric("comm_time_ns", "ns")
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

    def _kernel(self, name: str, op: Any) -> Any:
        a = self.adapter
        fids: dict[int, int] = {}

        def kernel(*args: Any, **kwargs: Any) -> Any:
            node = -1
            if a.active:
                try:
                    flags = FLAG_BACKWARD if _current_node() is not None else 0
                    fid = fids.get(flags)
                    if fid is None:
                        fid = fids[flags] = a.frames.op(f"c10d::{name}", flags)
                    c = a.collector
                    frames = c.python_frames()
                    frames.append(fid)
                    node = c.enter(frames)
                except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
                    a.fail(exc, "collective")
            start = time.monotonic_ns()
            try:
                with torch._C._AutoDispatchBelowAutograd():
                    out = op(*args, **kwargs)
            finally:
                if node >= 0:
                    a.leave(None, "collective")
            if node >= 0:
                try:
                    self._on_completion(out, node, start)
                except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
                    a.fail(exc, "collective")
            return out

        return kernel

    def _on_completion(self, out: Any, node: int, start: int) -> None:
        work = out[-1] if isinstance(out, tuple) and out else out
        if isinstance(work, torch.ScriptObject):  # the dispatcher hands back the boxed Work
            work = _Work.unbox(work)
        get_future = getattr(work, "get_future", None)
        if get_future is None:
            return
        a, metric, generation = self.adapter, self.metric, self.adapter.generation

        def done(_future: Any) -> None:  # on the backend's thread, with the GIL
            if a.active and a.generation == generation:  # the window that launched it is still open
                a.collector.add(node, metric, time.monotonic_ns() - start)

        try:
            get_future().then(done)
        except Exception:  # noqa: BLE001 - a backend without futures: the launch time stays
            pass
