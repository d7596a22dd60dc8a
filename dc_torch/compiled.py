"""``torch.compile`` backend: compiled regions as ``compiled`` frames.

``torch.compile(model, backend="deepcontext")`` (registered through the
``torch_dynamo_backends`` entry point) or ``backend=compile_backend(inner)``
compiles with the inner backend (Inductor by default) and wraps the result.

A compiled region is one run of one compiled graph: one ``compiled`` node,
under the module and line that called the graph, on both capture paths (the
Python path opens it as a scope under the module hooks' scopes; the native
path reports it to its RecordFunction capture as an operator,
``region_enter``, so the same frame walk as every operator's places it). With
Inductor the region is the run of the generated module's entry (its
``call()``): its time is made of its kernels, timed below it by their shims
(``inductor.py``), and what is left on the region itself is the generated
code between them (buffer allocation, size asserts). The runtime wrappers
around the graph (Dynamo's frame, AOTAutograd's wrappers, the autograd
Function) are the calling line's Python time. With another inner backend the
region is the run of what that backend returned. Dynamo's own record of a
compiled frame (``Torch-Compiled Region: N/M``) is never a node of its own
(``csrc/capture.cc``), so each region is counted once.

The eager hooks stand aside inside the wrapper (the native capture is
suspended on the thread): the region records itself. Below it, every graph
operation is placed under the source it came from, read from the FX node's
``nn_module_stack`` (module frames) and ``stack_trace`` (the user's lines),
with ``count`` one per execution, beside the kernels of the same source. The
autograd node the region's output carries is tagged like an eager operator's,
so the compiled backward lands under the same line, flagged, with its kernels
below it under their forward source.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch

from dc_core.collect.collector import KIND_COMPILED, KIND_OPERATOR, METRIC_COUNT
from dc_core.collect.ownfiles import cut_own_frames
from dc_core.record.session import active_sessions
from dc_torch.adapter import TorchAdapter
from dc_torch.hub import HookWindow, Hub, Interceptor
from dc_torch.inductor import Generated, compile_with_kernels
from dc_torch.ops import op_name
from dc_torch.source import source_of

_next_seq = torch._C._autograd._get_sequence_nr
_NO_KWARGS: dict = {}  # never mutated

_graph_ids = itertools.count()


def _active_hub() -> Hub | None:
    for session in active_sessions():
        adapter = session.adapter
        if isinstance(adapter, TorchAdapter) and adapter.hub is not None and adapter.hub.active:
            return adapter.hub
    return None


def _target_name(node: Any) -> str:
    if node.op == "call_method":
        return f"torch.Tensor.{node.target}"
    if node.op == "call_module":
        return str(node.target)
    return op_name(node.target)


class Region:
    """One compiled graph: its frame, its operations' sources, its runtime wrapper."""

    def __init__(self, gm: Any, inner_name: str) -> None:
        self.name = f"torch.compile graph {next(_graph_ids)} ({inner_name})"
        self.ops = [
            (source_of(node), _target_name(node))
            for node in gm.graph.nodes
            if node.op in ("call_function", "call_method", "call_module")
        ]
        self._window: HookWindow | None = None  # the window _nodes belong to
        self._nodes: dict[int, list[int]] = {}  # region node -> op nodes, in _window
        self.generated: list[
            Generated
        ] = []  # Inductor's modules: forward, then backward when compiled
        self._swapped_for: Hub | None = None
        self._at_entry = False  # while swapped: the forward module's entry is timed as the region
        self._scope: Interceptor | None = None
        self._fid: tuple[Hub, int] | None = None  # the region's frame, per hub
        self._run = _Run()  # this thread's run of the region in progress

    def add_generated(self, generated: Generated) -> None:
        """A module Inductor generated for this region (a backward may come mid-window)."""
        self.generated.append(generated)
        hub = self._swapped_for
        if hub is not None and hub.active:
            self._swap(generated, hub)

    def _kernels_on(self, hub: Hub) -> bool:
        """Time the generated kernels (and the forward module's entry) until the
        window closes; whether the region is timed at that entry."""
        if self._swapped_for is not hub and self.generated:
            self._swapped_for = hub
            hub.window.on_close.append(self._kernels_off)
            for generated in self.generated:
                self._swap(generated, hub)
        return self._at_entry

    def _swap(self, generated: Generated, hub: Hub) -> None:
        generated.swap(hub)
        if not generated.backward and generated.time_entry(functools.partial(self._entry, hub)):
            self._at_entry = True

    def _kernels_off(self) -> None:
        self._swapped_for = None
        self._at_entry = False
        for generated in self.generated:
            generated.restore()

    def wrap(self, compiled: Callable) -> Callable:
        region = self

        def run(*args: Any) -> Any:
            hub = _active_hub()
            if hub is None or torch.compiler.is_compiling():
                return compiled(*args)
            window = hub.window
            ident = threading.get_ident()
            state = region._run
            try:
                at_entry = region._kernels_on(hub)
                # The eager hooks stand aside inside the region: it records itself.
                nested = ident in window.suspended
                window.suspended.add(ident)
                suspend = at_entry and window.capture == "native"
                # AOTAutograd's records around the entry are the wrapper's, not operators
                if suspend:
                    hub.collector.capture_suspend(1)
                first_seq = _next_seq()
                outer = state.pending, state.node
                state.pending, state.node = at_entry, None
            except Exception as exc:
                hub.fail(exc, "compiled")
                state = None
            # outside the handler: the user's exception gets no profiler error as its context
            if state is None:
                return compiled(*args)
            node = None
            try:
                # at the entry, Region._entry opens the region; else here, around the backend's callable
                out = (
                    compiled(*args)
                    if at_entry
                    else region._call(hub, compiled, args, suspended=False)
                )
            except BaseException as exc:  # the user's, with the traceback it has without us
                cut_own_frames(exc)
                raise
            finally:
                try:
                    node = state.node
                    state.pending, state.node = outer
                    if suspend:
                        hub.collector.capture_suspend(-1)
                    if not nested:
                        window.suspended.discard(ident)
                except Exception as exc:
                    hub.fail(exc, "compiled")
            if node is not None and hub.active:
                try:
                    region._backward_here(hub, node, first_seq, args, out)
                except Exception as exc:
                    hub.fail(exc, "compiled")
            return out

        run._deepcontext_region = region  # type: ignore[attr-defined]
        return run

    def _entry(self, hub: Hub, original: Callable) -> Callable:
        """The forward module's entry (Inductor's ``call``), run as the region
        when the region's runtime wrapper (``run``) is what called it."""
        state = self._run

        def entry(inputs: Any) -> Any:
            if not (state.pending and hub.active):
                return original(inputs)
            state.pending = False
            return self._call(hub, original, (inputs,), suspended=True)

        entry.__wrapped__ = original  # type: ignore[attr-defined]
        return entry

    def _call(self, hub: Hub, fn: Callable, args: tuple, suspended: bool) -> Any:
        """``fn(*args)`` as this region's node, under the module and line that
        called it; ``suspended``: ``run`` holds the native capture suspended."""
        fid = self._frame(hub)
        if hub.window.capture == "native":
            return self._native_call(hub, fid, fn, args, suspended)
        scope = self._scope
        if scope is None or scope.hub is not hub:
            # No device marker: with Inductor, the kernel shims mark each kernel.
            scope = self._scope = Interceptor(
                hub,
                "compiled",
                capture=True,
                marks=False,
                after=functools.partial(self._after, hub),
            )
        return scope.call((fid,), fn, args, _NO_KWARGS)

    def _native_call(self, hub: Hub, fid: int, fn: Callable, args: tuple, suspended: bool) -> Any:
        """``fn(*args)`` reported to the native capture as an operator of frame
        ``fid`` (``region_enter``), the capture suspended inside it: the kernel
        shims record the graph, as scopes under it."""
        extension, suspend = hub.native.extension, hub.collector.capture_suspend
        try:
            if suspended:
                suspend(-1)  # the region itself is recorded
            node = extension.region_enter(fid)
            suspend(1)
        except Exception as exc:
            hub.fail(exc, "compiled")
            return fn(*args)
        try:
            return fn(*args)
        finally:
            try:
                suspend(-1)
                extension.region_exit()  # closes region_enter's slot, recorded or not
                if suspended:
                    suspend(1)
                if node >= 0 and hub.active:
                    self._ran_at(hub, node)
            except Exception as exc:
                hub.fail(exc, "compiled")

    def _frame(self, hub: Hub) -> int:
        cached = self._fid
        if cached is not None and cached[0] is hub:
            return cached[1]
        fid = hub.session.frame(KIND_COMPILED, self.name)
        hub.frames.names[fid] = self.name
        self._fid = (hub, fid)
        return fid

    def _after(
        self, hub: Hub, node: int, frames: tuple, note: Any, args: tuple, kwargs: dict, out: Any
    ) -> None:
        self._ran_at(hub, node)

    def _ran_at(self, hub: Hub, node: int) -> None:
        """The region ran at ``node``: its graph operations counted below it."""
        self._run.node = node
        self._count(hub, node)

    def _backward_here(self, hub: Hub, node: int, first_seq: int, args: tuple, out: Any) -> None:
        """The region's backward goes under the same calling line, mirrored."""
        if not torch.is_grad_enabled():
            return
        # the native capture places it by the nodes' sequence numbers
        if hub.window.capture == "native":
            hub.collector.capture_seq(
                hub.native.extension.thread_id(), first_seq, _next_seq(), node
            )
        else:
            hub.backward.hooks.tag(node, (self._frame(hub),), first_seq, args, _NO_KWARGS, out)

    def _count(self, hub: Hub, region_node: int) -> None:
        if self._window is not hub.window:
            self._window, self._nodes = hub.window, {}
        nodes = self._nodes.get(region_node)
        if nodes is None:
            frame = hub.session.frame
            nodes = self._nodes[region_node] = [
                hub.collector.path(
                    region_node,
                    [frame(*source) for source in sources] + [frame(KIND_OPERATOR, target)],
                )
                for sources, target in self.ops
            ]
        c = hub.collector
        for node in nodes:
            c.add(node, METRIC_COUNT, 1)


class _Run(threading.local):
    """A region's run in progress on one thread: whether the generated module's
    entry is to open the region (set by the runtime wrapper around it), and the
    node the region ran at."""

    pending = False
    node: int | None = None


def _inner_backend(inner: Any) -> tuple[Callable, str]:
    if callable(inner):
        return inner, getattr(inner, "__name__", type(inner).__name__)
    from torch._dynamo import lookup_backend

    return lookup_backend(inner), str(inner)


def compile_backend(inner: Any = "inductor", **options: Any) -> Callable:
    """A ``torch.compile`` backend that records compiled regions, compiling with ``inner``
    (a registered backend name or a backend callable); ``options`` go to ``inner``."""

    def deepcontext(gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
        if inner == "inductor":  # compile_fx takes gm over: read its sources first
            region = Region(gm, "inductor")
            compiled = compile_with_kernels(
                gm, example_inputs, region.add_generated, **{**options, **kwargs}
            )
            return region.wrap(compiled)
        backend, name = _inner_backend(inner)
        region = Region(gm, name)
        return region.wrap(backend(gm, example_inputs, **{**options, **kwargs}))

    return deepcontext


def deepcontext_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
    """The ``deepcontext`` backend of the entry point: Inductor inside, regions recorded."""
    return compile_backend("inductor")(gm, example_inputs, **kwargs)
