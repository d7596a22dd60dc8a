"""Backward operators under the forward context that created them.

Forward: the operator mode tags the autograd node its call created (and the
untagged nodes just behind it, for composite calls such as ``cross_entropy``)
with the call's context path and the node's sequence number, in
``node.metadata``, and registers two shared hooks on it. Backward: the
pre-hook asks autograd which node is running
(``torch._C._current_autograd_node()``) and opens a scope at
``backward phase → the same context path → forward operator [backward]``
(detail: the autograd node's name); the post-hook closes it. The scope's
parent is explicit, so nodes autograd runs on its worker threads land in the
same place. ``count`` is one per run of the node whose sequence number the
forward call produced.

Measured on the GPT workload, a dispatch mode around backward (one Python
call per ATen op) cost about ×1.14 alone; node hooks cost a fraction of
that, so ATen ops are recorded only in comprehensive mode (``AtenMode``).
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


def tag_forward(out: Any, context: tuple[int, ...], fid: int, hooks: "NodeHooks") -> None:
    """Remember on ``out``'s autograd node (and the nodes just behind it that the
    same call created) the context path and operator that made it, and hook them."""
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
    pre, post = hooks.pre, hooks.post
    node.register_prehook(pre)
    node.register_hook(post)
    pending, budget = [node], 8  # internal nodes of a composite call: bounded walk to tagged inputs
    while pending and budget:
        for nxt, _ in pending.pop().next_functions:
            if nxt is None or KEY in nxt.metadata or nxt.name() == _ACCUMULATE:
                continue
            nxt.metadata[KEY] = info
            nxt.register_prehook(pre)
            nxt.register_hook(post)
            pending.append(nxt)
            budget -= 1


class Origin:
    """The forward call an autograd node came from, and its backward node per window."""

    __slots__ = ("context", "fid", "seq", "node_name", "generation", "node")

    def __init__(self, context: tuple[int, ...], fid: int, seq: int, node_name: str) -> None:
        self.context, self.fid, self.seq, self.node_name = context, fid, seq, node_name
        self.generation, self.node = -1, 0


class NodeHooks:
    """Times each tagged autograd node as an operator scope under its forward context.

    Registered on the nodes a forward call created (``tag_forward``); the
    hooks run on whichever thread autograd runs the node on, and the scope's
    parent is explicit, so autograd's worker threads land in the same place.
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.pre = self._pre  # bound once: registered on every tagged node
        self.post = self._post

    def _pre(self, grad_outputs: Any) -> None:
        a = self.adapter
        state = a.thread_state()
        if not a.active:
            state.hooked.append(False)
            return
        try:
            node = _current_node()
            parent = backward_parent(a, node, state)
            a.collector.enter((), parent)
            state.hooked.append(True)
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            state.hooked.append(False)
            a.fail(exc, "backward")

    def _post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        a = self.adapter
        state = a.thread_state()
        if state.hooked and state.hooked.pop() and a.active:
            a.collector.exit()


def backward_parent(a: Any, node: Any, state: Any) -> int:
    """Node of ``backward → forward context → operator [backward]`` for autograd ``node``.

    Every hooked node's scope adds 1 to ``count`` on exit; a node that is not
    the one the forward call returned (an inner node of a composite call)
    takes that 1 back, so ``count`` is one per forward call's backward."""
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
    if info.seq >= 0 and node._sequence_nr() != info.seq:
        a.collector.add(info.node, METRIC_COUNT, -1)
    return info.node


class AtenMode(TorchDispatchMode):
    """Comprehensive mode: every ATen op as an operator scope under the
    enclosing scope (a torch call in forward, an autograd node in backward)."""

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
            fid = a.frames.aten(func, 0 if _current_node() is None else FLAG_BACKWARD)
            scope = c.enter((fid,))
            marker = a.device.mark(scope) if a.device.on else None
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            a.fail(exc, "aten")
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


class BackwardRunner:
    """Runs ``Tensor.backward`` / ``autograd.grad`` inside the backward phase."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.hooks = NodeHooks(adapter)

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        a = self.adapter
        try:
            phase = a.session.phase("backward")
            phase.__enter__()
        except Exception as exc:  # noqa: BLE001
            a.fail(exc, "backward")
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            phase.__exit__(None, None, None)
