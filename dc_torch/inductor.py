"""Inductor's generated kernels, named, timed and placed under their source.

The ``deepcontext`` backend compiles with Inductor's ``compile_fx`` and its
own ``inner_compile``: each forward or backward graph AOTAutograd hands to
Inductor is compiled by ``compile_fx_inner`` with Inductor's provenance
tracking on (``trace.provenance_tracking_level``, the "basic" level: it only
records, per kernel, the post-grad FX nodes it fused and their stack
traces, and the record is kept in the FX graph cache with the kernel). From
the compiled graph (``CompiledFxGraph``) we read that record and the
generated wrapper module, whose ``call()`` runs the kernels through module
globals (``cpp_fused_*``, ``triton_*``, ``extern_kernels.mm``). A kernel's
place is the source of the nodes it fused (``source.source_of``), their
common prefix when a kernel fuses several lines.

While a window is open the module's kernel globals are swapped for thin
shims that open a ``kernel`` scope (name = the global, detail = the device,
flagged ``backward`` in a backward graph) under the innermost open scope:
the compiled region in forward, the region's autograd node in backward.
The forward graph's entry (the compiled graph's ``current_callable``, the
module's ``call``) is run through the compiled region's own timing
(``compiled.py``), so a region is the generated code's run and its kernels
are what its time is made of. When the window closes the originals are put
back, so outside windows the generated code runs untouched. On CUDA each
shim also opens the device tracer's marker, so the device kernels Kineto
sees land under it with ``device_time_ns``.

A global called at several sites in one graph (``extern_kernels.mm`` for
two matmuls) has one provenance entry per site, numbered in code order,
which is call order; the shim cycles through the sites. Two threads running
the same graph at once can interleave that cycle (time stays right, a site
may be swapped with another).

Inductor's AOTAutograd cache is bypassed for these compiles (a hit would
skip ``inner_compile`` and with it the kernels' provenance); the FX graph
cache, which holds the slow C++/Triton compile, still applies.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import FLAG_BACKWARD, INHERIT, KIND_KERNEL
from dc_torch.hub import Interceptor
from dc_torch.source import Frame, common_prefix, module_frames, python_frames, source_of

if TYPE_CHECKING:
    from dc_torch.hub import Hub

logger = logging.getLogger("deepcontext")
PROVENANCE = {"trace.provenance_tracking_level": 2}
#: Set in a generated module's globals while its kernels are shims, and on an entry standing in for one.
_SWAPPED = "__deepcontext_swapped__"


def compile_with_kernels(
    gm: Any, example_inputs: list, found: Callable[[Generated], None], **kwargs: Any
) -> Callable:
    """``compile_fx(gm, example_inputs, **kwargs)``, calling ``found`` with each
    forward/backward graph's generated module (also for a backward compiled later)."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner(graph: Any, inputs: list, **inner_kwargs: Any) -> Any:
        with torch._inductor.config.patch(PROVENANCE), _fresh_provenance():
            compiled = compile_fx_inner(graph, inputs, **inner_kwargs)
        try:
            generated = Generated.of(graph, compiled, inputs, bool(inner_kwargs.get("is_backward")))
            if generated is not None:
                found(generated)
        except Exception as exc:  # the profiler never breaks compiling
            _warn_once(repr(exc))
        return compiled

    with torch._functorch.config.patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner, **compile_fx_kwargs(kwargs))


def compile_fx_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``torch.compile``'s ``mode=`` and ``options=`` (passed to a named backend as
    keywords) as Inductor's ``config_patches``, the way Inductor's own wrapper does."""
    kwargs = dict(kwargs)
    mode, options = kwargs.pop("mode", None), kwargs.pop("options", None)
    patches = dict(kwargs.pop("config_patches", None) or {})
    if mode and mode != "default":
        patches.update(torch._inductor.list_mode_options(mode))
    patches.update(options or {})
    if patches:
        kwargs["config_patches"] = patches
    return kwargs


def _fresh_provenance() -> Any:
    """Inductor's provenance records are module globals; a backward compiled
    lazily (outside ``compile_fx``) would otherwise see earlier graphs' kernels."""
    reset = getattr(torch._inductor.debug, "reset_provenance_globals", None)
    return reset() if reset is not None else contextlib.nullcontext()


@functools.cache
def _warn_once(reason: str) -> None:
    logger.warning("DeepContext: Inductor kernels not recorded for a compiled graph (%s)", reason)


def kernel_sites(graph: Any, compiled: Any) -> dict[str, list[list[Frame]]]:
    """``{kernel global: [source frames per call site, in call order]}`` from the
    provenance Inductor recorded while compiling ``graph`` (a post-AOT FX graph)."""
    mapping = json.loads(getattr(compiled, "inductor_provenance_mapping_str", None) or "{}")
    traces = json.loads(getattr(compiled, "inductor_provenance_stack_traces_str", None) or "{}")
    fused = mapping.get("cppCodeToPost") or {}  # Inductor's name for every backend's kernels
    nodes = {node.name: node for node in graph.graph.nodes}
    modules_at: dict[tuple[Frame, ...], list[list[Frame]]] = {}
    for node in graph.graph.nodes:
        if node.meta.get("stack_trace"):
            modules_at.setdefault(tuple(python_frames(node.meta["stack_trace"])), []).append(
                module_frames(node)
            )
    sites = []
    for key in set(fused) | set(traces):
        name, _, handle = key.rpartition(":")
        if not name or not handle.isdigit():
            continue
        # The fused nodes themselves when the graph still names them (a fresh compile);
        # else their stack traces, with the modules of the graph's nodes on those lines.
        sources = [
            source_of(nodes[n])
            for n in fused.get(key, ())
            if n in nodes and nodes[n].meta.get("stack_trace")
        ]
        if not sources:
            for trace in traces.get(key, ()):
                lines = python_frames(trace)
                sources.append(common_prefix(modules_at.get(tuple(lines), [[]])) + lines)
        sites.append((int(handle), name, common_prefix(sources)))
    result: dict[str, list[list[Frame]]] = {}
    for _, name, frames in sorted(sites, key=lambda site: site[0]):
        result.setdefault(name, []).append(frames)
    return result


class Generated:
    """One module Inductor generated (a forward or a backward graph): its globals,
    its kernels' call sites, and the swap of those kernels for timing shims."""

    def __init__(
        self,
        namespace: dict,
        sites: dict[str, list[list[Frame]]],
        device: str,
        backward: bool,
        output: Any = None,
    ) -> None:
        self.namespace = namespace
        self.sites = sites
        self.device = device
        self.backward = backward
        self.output = output  # Inductor's compiled graph (CompiledFxGraph): its current_callable runs the module
        self.saved: dict[str, Any] = {}  # global -> original, while this object swapped them
        self._entry: Any = None  # the output's own current_callable, while time_entry's stands in

    @classmethod
    def of(cls, graph: Any, compiled: Any, inputs: list, backward: bool) -> Generated | None:
        sites = kernel_sites(graph, compiled)
        tops = {name.split(".", 1)[0] for name in sites}
        namespace = _module_namespace(getattr(compiled, "current_callable", None), tops)
        if not sites or namespace is None:
            return None
        device = next(
            (
                str(t.device)
                for t in inputs
                if isinstance(t, torch.Tensor) and t.device.type != "cpu"
            ),
            "cpu",
        )
        return cls(namespace, sites, device, backward, compiled)

    def swap(self, hub: Hub) -> None:
        """Put timing shims in place of the kernels (idempotent). Inductor hands
        the same module to graphs whose code is identical, so the module itself
        says whether it is swapped: its first swapper's shims serve them all."""
        if self.saved or _SWAPPED in self.namespace:
            return
        frame = hub.session.frame
        flags = FLAG_BACKWARD if self.backward else 0
        tree: dict[str, Any] = {}
        for name, sources in self.sites.items():
            kernel = frame(KIND_KERNEL, name, "", 0, self.device, flags)
            paths = [tuple(frame(*f) for f in source) + (kernel,) for source in sources]
            *outer, leaf = name.split(".")
            level = tree
            for part in outer:
                level = level.setdefault(part, {})
                if not isinstance(level, dict):
                    break
            else:
                level[leaf] = paths
        saved = {top: self.namespace[top] for top in tree if top in self.namespace}
        if not saved:
            return
        shims = {top: _shim(original, tree[top], hub) for top, original in saved.items()}
        self.saved = saved
        self.namespace[_SWAPPED] = True
        self.namespace.update(shims)

    def time_entry(self, wrap: Callable[[Callable], Callable]) -> bool:
        """Run the module's entry (``call``, as the compiled graph object holds it)
        through ``wrap(original)`` until `restore`; whether it now does (not where
        another ``Generated`` of the same graph object wraps it already)."""
        output = self.output
        if self._entry is None:
            original = getattr(output, "current_callable", None)
            if original is None or getattr(original, _SWAPPED, False):
                return False
            entry = wrap(original)
            setattr(entry, _SWAPPED, True)
            self._entry = original
            output.current_callable = entry
        return True

    def restore(self) -> None:
        """Put the original kernels and entry back (if this object swapped them)."""
        saved, self.saved = self.saved, {}
        if saved:
            self.namespace.update(saved)
            self.namespace.pop(_SWAPPED, None)
        entry, self._entry = self._entry, None
        if entry is not None:
            self.output.current_callable = entry


def _module_namespace(entry: Any, names: set[str]) -> dict | None:
    """Globals of the generated module behind ``entry`` (Inductor's compiled callable:
    the module's ``call``, possibly wrapped): the first function globals holding ``names``."""
    pending, seen = [entry], set()
    while pending:
        obj = pending.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        func = getattr(obj, "__func__", obj)
        namespace = getattr(func, "__globals__", None)
        if isinstance(namespace, dict) and names <= namespace.keys():
            return namespace
        pending.append(getattr(obj, "__wrapped__", None))
        pending.extend(
            cell.cell_contents
            for cell in (getattr(func, "__closure__", None) or ())
            if _cell_filled(cell)
        )
    return None


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _shim(original: Any, sub: Any, hub: Hub) -> Any:
    if isinstance(sub, dict):  # a namespace such as ``extern_kernels``: shim its attributes
        return _Namespace(
            original,
            {
                attr: _shim(getattr(original, attr), s, hub)
                for attr, s in sub.items()
                if hasattr(original, attr)
            },
        )
    # a Triton launcher: ``k.run(...)``
    if hasattr(original, "run") and not hasattr(original, "__code__"):
        return _Launcher(original, _timed(original.run, sub, hub))
    return _timed(original, sub, hub)


class _Namespace:
    """Stands for a namespace global; shimmed attributes first, the rest from the original."""

    def __init__(self, original: Any, attrs: dict[str, Any]) -> None:
        self.__dict__.update(attrs)
        self.__dict__["_original"] = original

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_original"], name)


class _Launcher:
    """Stands for a Triton kernel: a timed ``run``, every other attribute the original's."""

    def __init__(self, original: Any, run: Callable) -> None:
        self._original = original
        self.run = run

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _timed(fn: Callable, paths: list[tuple[int, ...]], hub: Hub) -> Callable:
    """``fn`` as a ``kernel`` scope at ``paths[site]`` under the innermost open scope,
    ``site`` cycling through the call sites in call order."""
    # A kernel adds no Python frames: its user depth is the enclosing scope's, no stack walk.
    scope = Interceptor(hub, "kernel", user_depth=INHERIT)
    n = len(paths)
    site = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        if not hub.active:
            return fn(*args, **kwargs)
        k = site[0]
        site[0] = k + 1 if k + 1 < n else 0
        return scope.call(paths[k], fn, args, kwargs)

    timed.__wrapped__ = fn  # type: ignore[attr-defined]
    return timed
