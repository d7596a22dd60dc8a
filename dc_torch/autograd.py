"""Backward operators under the forward context that created them.

Forward: the operator mode tags the autograd node its call created (and the
untagged nodes just behind it, for composite calls such as ``cross_entropy``)
with the call's context path, in ``node.metadata``. Backward: a
``TorchDispatchMode`` pushed around ``Tensor.backward`` / ``autograd.grad``
sees every ATen op autograd runs, asks autograd which node is running
(``torch._C._current_autograd_node()``, the node whose sequence number pairs
it with its forward call) and records the op under
``backward phase → the same context path → forward operator [backward]``.
The dispatch mode is part of the thread-local state autograd hands to its
worker threads, so ops run there are attributed the same way.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from dc_core.collector import FLAG_BACKWARD, METRIC_COUNT

KEY = "deepcontext"
BACKWARD_ENTRY_POINTS = {torch.Tensor.backward, torch.autograd.grad}
_current_node = torch._C._current_autograd_node
_Tensor = torch.Tensor
_ACCUMULATE = "torch::autograd::AccumulateGrad"


def tag_forward(out: Any, context: tuple[int, ...], fid: int) -> None:
    """Remember on ``out``'s autograd node the context path and operator that made it."""
    if not isinstance(out, _Tensor):
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], _Tensor):
            out = out[0]
        else:
            return
    node = out.grad_fn
    if node is None:
        return
    meta = node.metadata
    if KEY in meta:
        return
    info = meta[KEY] = Origin(context, fid, node._sequence_nr(), node.name())
    pending, budget = [node], 8  # internal nodes of a composite call: bounded walk to tagged inputs
    while pending and budget:
        for nxt, _ in pending.pop().next_functions:
            if nxt is None or KEY in nxt.metadata or nxt.name() == _ACCUMULATE:
                continue
            nxt.metadata[KEY] = info
            pending.append(nxt)
            budget -= 1


class Origin:
    """The forward call an autograd node came from, and its backward node per window."""

    __slots__ = ("context", "fid", "seq", "node_name", "generation", "node")

    def __init__(self, context: tuple[int, ...], fid: int, seq: int, node_name: str) -> None:
        self.context, self.fid, self.seq, self.node_name = context, fid, seq, node_name
        self.generation, self.node = -1, 0


class AtenMode(TorchDispatchMode):
    """ATen ops as operator scopes: under their forward context in backward,
    under the enclosing operator in forward (comprehensive mode)."""

    def __init__(self, adapter: Any) -> None:
        super().__init__()
        self.adapter = adapter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        a = self.adapter
        if not a.active:
            return func(*args, **kwargs)
        try:
            c = a.collector
            node = _current_node()
            if node is None:
                parent, fid = -1, a.frames.aten(func, 0)
            else:
                parent, fid = self._backward_parent(node), a.frames.aten(func, FLAG_BACKWARD)
            scope = c.enter([fid], parent)
            marker = a.device.mark(scope) if a.device.on else None
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            a.fail(exc, "backward")
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs)
        finally:
            if marker is not None:
                marker.__exit__(None, None, None)
            c.exit()
        try:
            count = flop_registry.get(func.overloadpacket)
            if count is not None:
                c.add(scope, a.metric_flops, int(count(*args, **kwargs, out_val=out)))
        except Exception:  # noqa: BLE001 - FLOPs are best effort; an odd signature is not an error
            pass
        return out

    def _backward_parent(self, node: Any) -> int:
        """Node of ``backward → forward context → operator [backward]`` for autograd ``node``."""
        a = self.adapter
        info = node.metadata.get(KEY)
        if info is None:  # AccumulateGrad, or a node made outside the window: under the phase
            name = node.name()
            info = a.untagged.get(name)
            if info is None:
                info = a.untagged[name] = Origin((), a.frames.op(name, FLAG_BACKWARD), -1, "")
        if info.generation != a.generation:
            frames = info.context + (
                a.frames.backward_op(a.frames.names[info.fid], info.node_name) if info.node_name else info.fid,
            )
            info.node = a.collector.path(a.backward_phase_node(), frames)
            info.generation = a.generation
        state = a.thread_state()
        if state.last_backward is not node:
            # one count per run of the node the forward call returned (or of an untagged node)
            state.last_backward = node
            if info.seq < 0 or node._sequence_nr() == info.seq:
                a.collector.add(info.node, METRIC_COUNT, 1)
        return info.node


class BackwardRunner:
    """Runs ``Tensor.backward`` / ``autograd.grad`` inside the backward phase with ``AtenMode`` on."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.mode = AtenMode(adapter)

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        a = self.adapter
        try:
            phase = a.session.phase("backward")
            phase.__enter__()
            a.thread_state().last_backward = None
        except Exception as exc:  # noqa: BLE001
            a.fail(exc, "backward")
            return func(*args, **kwargs)
        try:
            if a.aten_forward:  # comprehensive mode: the window-wide AtenMode already sees backward
                return func(*args, **kwargs)
            with self.mode:
                return func(*args, **kwargs)
        finally:
            phase.__exit__(None, None, None)
