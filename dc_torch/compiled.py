"""``torch.compile`` backend: compiled regions as ``compiled`` frames.

``torch.compile(model, backend="deepcontext")`` (registered through the
``torch_dynamo_backends`` entry point) or ``backend=compile_backend(inner)``
compiles with the inner backend (Inductor by default) and wraps the result.
At run time inside a window, each call of the compiled graph is a
``compiled`` scope under the calling Python line (time and count); the
eager hooks stand aside inside it. Below it, every graph operation is placed
under the source it came from, read from the FX node's ``nn_module_stack``
(module frames) and ``stack_trace`` (the user's lines), with ``count`` one
per execution. With Inductor, the kernels it generated sit beside those
operations under the same source, with their own time (``inductor.py``);
what is left on the compiled frame is the wrapper's own work (allocation,
Python glue). The autograd node the region's output carries is tagged like
an eager operator's, so the compiled backward lands under the same line,
flagged, with its kernels below it under their forward source.
"""

from __future__ import annotations

import functools
import itertools
import threading
from typing import Any, Callable

import torch

from dc_core.collect.collector import KIND_COMPILED, KIND_OPERATOR, METRIC_COUNT
from dc_core.record.session import active_sessions

from dc_torch.adapter import TorchAdapter
from dc_torch.hub import Hub, Interceptor, Window
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
        self._window: Window | None = None  # the window _nodes belong to
        self._nodes: dict[int, list[int]] = {}  # region node -> op nodes, in _window
        self.generated: list[Generated] = []  # Inductor's modules: forward, then backward when compiled
        self._swapped_for: Hub | None = None
        self._scope: Interceptor | None = None

    def add_generated(self, generated: Generated) -> None:
        """A module Inductor generated for this region (a backward may come mid-window)."""
        self.generated.append(generated)
        hub = self._swapped_for
        if hub is not None and hub.active:
            generated.swap(hub)

    def _kernels_on(self, hub: Hub) -> None:
        """Time the generated kernels until the window closes."""
        if self._swapped_for is hub or not self.generated:
            return
        self._swapped_for = hub
        hub.window.on_close.append(self._kernels_off)
        for generated in self.generated:
            generated.swap(hub)

    def _kernels_off(self) -> None:
        self._swapped_for = None
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
            try:
                region._kernels_on(hub)
                scope, fid = region._enter(hub)
                # The eager hooks stand aside inside the region: it records itself.
                nested = ident in window.suspended
                window.suspended.add(ident)
                native = window.capture == "native"
                if native:
                    hub.collector.capture_suspend(1)
            except Exception as exc:
                hub.fail(exc, "compiled")
                return compiled(*args)
            try:
                return scope.call((fid,), compiled, args, _NO_KWARGS, _next_seq())
            finally:
                try:
                    if native:
                        hub.collector.capture_suspend(-1)
                    if not nested:
                        window.suspended.discard(ident)
                except Exception as exc:
                    hub.fail(exc, "compiled")

        run._deepcontext_region = region  # type: ignore[attr-defined]
        return run

    def _enter(self, hub: Hub) -> tuple[Interceptor, int]:
        """This region's interceptor for ``hub``, and its frame."""
        scope = self._scope
        if scope is None or scope.hub is not hub:
            # No device marker: with Inductor, the kernel shims mark each kernel.
            scope = self._scope = Interceptor(hub, "compiled", capture=True, marks=False,
                                              after=functools.partial(self._recorded, hub))
        fid = hub.session.frame(KIND_COMPILED, self.name)
        hub.frames.names[fid] = self.name
        return scope, fid

    def _recorded(self, hub: Hub, node: int, frames: tuple, first_seq: int, args: tuple, kwargs: dict,
                  out: Any) -> None:
        self._count(hub, node)
        if torch.is_grad_enabled():
            # the region's backward goes under the same calling line, mirrored
            if hub.window.capture == "native":  # the native capture places it by the nodes' sequence numbers
                hub.collector.capture_seq(hub.native.extension.thread_id(), first_seq, _next_seq(), node)
            else:
                hub.backward.hooks.tag(node, frames, first_seq, args, kwargs, out)

    def _count(self, hub: Hub, region_node: int) -> None:
        if self._window is not hub.window:
            self._window, self._nodes = hub.window, {}
        nodes = self._nodes.get(region_node)
        if nodes is None:
            frame = hub.session.frame
            nodes = self._nodes[region_node] = [
                hub.collector.path(
                    region_node, [frame(*source) for source in sources] + [frame(KIND_OPERATOR, target)]
                )
                for sources, target in self.ops
            ]
        c = hub.collector
        for node in nodes:
            c.add(node, METRIC_COUNT, 1)


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
            compiled = compile_with_kernels(gm, example_inputs, region.add_generated, **{**options, **kwargs})
            return region.wrap(compiled)
        backend, name = _inner_backend(inner)
        region = Region(gm, name)
        return region.wrap(backend(gm, example_inputs, **{**options, **kwargs}))

    return deepcontext


def deepcontext_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Callable:
    """The ``deepcontext`` backend of the entry point: Inductor inside, regions recorded."""
    return compile_backend("inductor")(gm, example_inputs, **kwargs)
