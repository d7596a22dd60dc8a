"""Backward operators under the forward context that created them.

Forward: the operator mode marks the autograd nodes its call created (the
output's node, and for composite calls such as ``cross_entropy`` the inner
nodes behind it) in ``node.metadata`` with the operator's *scope node*
(``NodeHooks.tag``), and hooks them. Backward: a pre-hook asks
autograd which node is running (``torch._C._current_autograd_node()``) and
opens a scope at ``backward phase → the same context path → forward operator
[backward]`` (detail: the autograd node's name), found by the collector's
``mirror`` of the operator's parent under the backward phase. The scope's
parent is explicit, so nodes autograd runs on its worker threads land in the
same place. ``count`` is exact per autograd node: one per run.

Why a node id and not the context path: building the path tuple per forward
call and rebuilding the node from it per backward node cost about ×1.02 of the
GPT step; the mark is one int, and the backward node is memoized per (mark,
autograd node type) for the window.

Measured on the GPT workload, a dispatch mode around backward (one Python
call per ATen op) cost about ×1.14 alone; node hooks cost a fraction of
that, so ATen ops are recorded only in comprehensive mode (``ops.AtenMode``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import FLAG_BACKWARD
from dc_core.collect.ownfiles import cut_own_frames

if TYPE_CHECKING:
    from dc_torch.hub import Hub

KEY = "deepcontext"
BACKWARD_ENTRY_POINTS = {torch.Tensor.backward, torch.autograd.grad}
_current_node = torch._C._current_autograd_node
_Tensor = torch.Tensor
_ACCUMULATE = torch._C._functions.AccumulateGrad
_task_id = torch._C._current_graph_task_id
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def pack(generation: int, op_node: int, fid: int) -> int:
    """A forward call's mark. Marks are plain ints: one stays on every hooked
    node until its graph dies, and ints are not tracked by the garbage
    collector (a tuple per node cost a collection every step)."""
    return (generation << 31 | fid) << 32 | op_node


def unpack(mark: int) -> tuple[int, int, int]:
    """``(generation, op_node, fid)`` of a mark made by ``pack``."""
    return mark >> 63, mark & 0xFFFFFFFF, (mark >> 32) & 0x7FFFFFFF


class NodeHooks:
    """Times each marked autograd node as an operator scope under its forward context.

    Registered on the nodes a forward call created (``tag``); the scope's
    parent is explicit, so nodes run on autograd's worker threads land in the
    same place. Two ways to close a node's scope:

    * nodes autograd runs on the thread that called ``backward`` (CPU tensors)
      get one pre-hook: it closes the previous node's scope on this thread and
      opens its own; the last one closes when the backward pass ends (an
      engine callback). A second hook per node cost about ×1.02 of the GPT
      step. What runs between two hooked nodes (``AccumulateGrad``, the
      engine's own work) is billed to the node before it. The hook is
      registered as a tensor pre-hook through ``node._register_hook_dict``
      with one shared holder tensor (``_hook_holder``): no dict and no
      ``RemovableHandle`` per node, a tenth of ``register_prehook``'s cost.
    * nodes run on device worker threads, where no end-of-pass callback runs,
      get a pre- and a post-hook.
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.generation = -1
        self.nodes: dict[Any, int] = {}  # (mark, node type) -> backward node
        # bound once: registered on every marked node
        self._pre_hook, self._post_hook, self._chained_hook = self._pre, self._post, self._chained
        self.holder = _hook_holder(self._chained_hook)

    def attach(self, node: Any, paired: bool) -> None:
        """Hook autograd ``node``: ``paired`` (run on a device thread) gets a pre-
        and a post-hook, else the one chained pre-hook."""
        if paired:
            node.register_prehook(self._pre_hook)
            node.register_hook(self._post_hook)
        elif self.holder is not None:
            node._register_hook_dict(self.holder)
        else:
            node.register_prehook(self._chained_hook)

    def tag(
        self,
        op_node: int,
        frames: tuple,
        first_seq: int | None,
        args: tuple,
        kwargs: dict,
        out: Any,
    ) -> None:
        """An interceptor's ``after`` (``hub.Interceptor``): mark ``out``'s autograd
        node, and the nodes behind it that the same call created (composite calls
        such as ``cross_entropy``), as made by the operator scope ``op_node``
        (frame ``frames[-1]``) of this window, and hook them.

        ``first_seq`` is autograd's next sequence number before the call (None
        with grad off): the nodes the call created are exactly those numbered
        from there on."""
        if first_seq is None:
            return
        if not isinstance(out, _Tensor):
            if isinstance(out, (tuple, list)) and out and isinstance(out[0], _Tensor):
                out = out[0]
            else:
                return
        node = out.grad_fn
        if node is None:
            return
        seq = node._sequence_nr()
        if seq < first_seq:
            return  # no node of this call's (e.g. an input returned as is)
        mark = pack(self.hub.window.generation, op_node, frames[-1])
        node.metadata[KEY] = mark
        paired = not out.is_cpu  # run on a device thread: the nodes behind it too
        self.attach(node, paired)
        if seq == first_seq:
            return  # the output's node is the call's first: nothing behind it is the call's
        pending = [node]
        while pending:
            for nxt, _ in pending.pop().next_functions:
                if nxt is None or type(nxt) is _ACCUMULATE or nxt._sequence_nr() < first_seq:
                    continue
                meta = nxt.metadata
                if KEY in meta:  # reached twice (a diamond inside the call)
                    continue
                meta[KEY] = mark
                self.attach(nxt, paired)
                pending.append(nxt)

    def _open(self, hub: Hub) -> None:
        """Open the scope of the node autograd is running now."""
        generation = hub.window.generation
        if self.generation != generation:
            self.nodes.clear()
            self.generation = generation
        node = _current_node()
        key = (node.metadata.get(KEY), type(node))
        parent = self.nodes.get(key)
        if parent is None:
            parent = self.nodes[key] = backward_node(hub, node, key[0])
        hub.collector.enter((), parent)  # positional: keywords cost ~100 ns a node (pybind11)

    def _chained(self, grads: Any) -> None:
        hub = self.hub
        if not hub.active:
            return
        try:
            passes = hub.thread_state().passes
            task = _task_id()
            if passes and passes[-1][0] == task:
                hub.collector.unwind(passes[-1][1])  # the previous node's scope ends here
            else:  # this thread's first node of a backward pass
                passes.append((task, hub.collector.depth()))
                _queue_callback(self._end_pass)
            self._open(hub)
        except Exception as exc:
            hub.fail(exc, "backward")

    def _end_pass(self) -> None:
        hub = self.hub
        try:
            passes = hub.thread_state().passes
            task = _task_id()
            while passes:
                done, base = passes.pop()
                if hub.active:
                    hub.collector.unwind(base)
                if done == task:
                    break
        except Exception as exc:
            hub.fail(exc, "backward")

    def _pre(self, grad_outputs: Any) -> None:
        hub = self.hub
        state = hub.thread_state()
        if not hub.active:
            state.hooked.append(False)
            return
        try:
            self._open(hub)
            state.hooked.append(True)
        except Exception as exc:
            state.hooked.append(False)
            hub.fail(exc, "backward")

    def _post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        hub = self.hub
        state = hub.thread_state()
        if state.hooked and state.hooked.pop() and hub.active:
            hub.collector.exit()


def _hook_holder(hook: Any) -> Any:
    """A tensor whose ``_backward_hooks`` holds ``hook``: ``node._register_hook_dict(holder)``
    makes torch call ``hook`` before ``node`` runs, the way ``Tensor.register_hook``
    hooks a tensor's node, with the dict shared by every node. ``None`` where this
    torch does not do so (then ``register_prehook`` is used)."""
    try:
        holder = torch.empty(0)
        hooks = OrderedDict()
        hooks[KEY] = hook
        holder._backward_hooks = hooks
        seen = []
        probe = OrderedDict()
        probe[KEY] = lambda grad: seen.append(_current_node().name())
        tester = torch.empty(0)
        tester._backward_hooks = probe
        with torch.inference_mode(False), torch.enable_grad():
            x = torch.ones(2, requires_grad=True)
            y = x * 2.0
            y.grad_fn._register_hook_dict(tester)
            y.sum().backward()
        return holder if seen == ["MulBackward0"] else None
    except Exception:  # an internal API: fall back to the public one
        return None


def backward_node(hub: Hub, node: Any, mark: Any) -> int:
    """Node of ``backward → forward context → operator [backward]`` for autograd
    ``node`` (detail: the node's name, so a composite call's inner nodes get
    their own rows).

    A node marked in an earlier window (its graph outlived the window), or not
    at all, has no forward node in this tree: it goes under the phase by name."""
    c, frames, top = hub.collector, hub.frames, hub.backward_root()
    name = node.name()
    if type(mark) is int:
        generation, op_node, fid = unpack(mark)
        if generation == hub.window.generation:
            context = c.mirror(c.parent(op_node), top)
            return c.child(context, frames.backward_op(frames.names[fid], name))
    return c.child(top, frames.op(name, FLAG_BACKWARD))


class BackwardRunner:
    """Runs ``Tensor.backward`` / ``autograd.grad`` inside the backward phase."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.hooks = NodeHooks(hub)

    def run(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        hub = self.hub
        try:
            phase = hub.session.phase("backward")
            phase.__enter__()
            passes = hub.thread_state().passes
            opened = len(passes)
        except Exception as exc:
            hub.fail(exc, "backward")
            phase = None
        # outside the handler: the user's exception gets no profiler error as its context
        if phase is None:
            return func(*args, **kwargs)
        try:
            # once: the user's backward, and its exception, are the user's
            return func(*args, **kwargs)
        except BaseException as exc:
            cut_own_frames(exc)
            raise
        finally:
            # After a failed backward the engine runs no end-of-pass callback;
            # leaving the phase closes the scopes, this forgets the pass.
            try:
                del passes[opened:]
                phase.__exit__(None, None, None)
            except Exception as exc:
                hub.fail(exc, "backward")
