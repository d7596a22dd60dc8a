"""DeepSpeed's engine and ZeRO runtime, read as phases and sharding work.

A DeepSpeed loop calls ``engine(batch)``, ``engine.backward(loss)`` and
``engine.step()``. The engine's backward does more than autograd (it reduces
the gradients, or their last bucket, after autograd returns) and its step is
the optimizer update whatever optimizer ZeRO wraps: while a window is open
the two are phases ``backward`` and ``optimizer``, as ``loss.backward()`` and
``optimizer.step()`` are (`dc_torch.phases`).

ZeRO-3 gathers a module's parameters in a forward pre-hook and again before
its backward, releases them after, and prefetches the parameters of the
modules its trace says come next. Each of those runs as a ``sharding`` frame
(``ZeRO::pre_forward``, …) where DeepSpeed's hook runs, under the module. A
prefetch (``ZeRO::forward_prefetch``) names the parameters' modules and the
module whose fetch issued it; on the Python capture path it goes under the
modules it gathers for (their nearest common ancestor), on the native path it
stays in the issuing fetch: that fetch runs inside an operator the capture
times, and a scope placed elsewhere would bill the same time twice. A
gradient bucket's reduction (``ZeRO::reduce_scatter_grads`` for ZeRO-3,
``ZeRO::reduce_bucket`` for ZeRO-1/2) names the bucket's modules; it runs in
the hook of the gradient that overflows the bucket, under that autograd
operator, or, the last one, in the engine's backward after autograd, where
ZeRO-3's goes under the bucket's modules' common ancestor. The collectives
inside (`dc_torch.collectives`) nest under these frames. Everything is put
back when the window closes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import INNERMOST
from dc_core.model.comm import ZERO_ENV, zero_entry
from dc_torch.sharding import ShardingHooks

if TYPE_CHECKING:
    from dc_torch.hub import Hub
    from dc_torch.phases import PhaseHooks

ENGINE = "deepspeed.runtime.engine"
OFFLOAD = "deepspeed.runtime.zero.parameter_offload"
COORDINATOR = "deepspeed.runtime.zero.partitioned_param_coordinator"
STAGE3 = "deepspeed.runtime.zero.stage3"
STAGE12 = "deepspeed.runtime.zero.stage_1_and_2"

#: ZeRO-3's per-module hooks (``DeepSpeedZeRoOffload``): name -> (frame name, backward).
MODULE_HOOKS = {
    "pre_sub_module_forward_function": ("ZeRO::pre_forward", False),
    "post_sub_module_forward_function": ("ZeRO::post_forward", False),
    "pre_sub_module_backward_function": ("ZeRO::pre_backward", True),
    "post_sub_module_backward_function": ("ZeRO::post_backward", True),
}
#: The coordinator's gather of a set of parameters (name-mangled private method).
GATHER = "_PartitionedParameterCoordinator__all_gather_params"
#: ZeRO-3's reduce-scatter of a gradient bucket (name-mangled private method).
REDUCE3 = "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"
#: Module names a frame's detail lists before it says how many more.
LISTED = 4
_current_node = torch._C._current_autograd_node


def _class(module: str, name: str) -> Any:
    """``name`` of ``module`` where DeepSpeed has imported it, else None."""
    return getattr(sys.modules.get(module), name, None)


class ZeroHooks(ShardingHooks):
    """Wraps DeepSpeed's engine and ZeRO runtime for one adapter's hub, per window."""

    def __init__(self, hub: Hub, phases: PhaseHooks) -> None:
        super().__init__(hub)
        self.phases = phases
        self._models: list[_Model] = []  # the modules ZeRO wraps, as learned
        self._entry = ""  # the last engine's settings (`environment`)

    def install(self) -> None:
        engine = _class(ENGINE, "DeepSpeedEngine")
        if engine is None:
            return
        self.contexts, self._models = {}, []
        self._wrap(engine, "forward", self._forward)
        self.phases.patch(engine, "backward", "backward")
        # its update is torch's optimizer's, inside: that ends the update
        self.phases.patch(engine, "step", "optimizer")
        offload = _class(OFFLOAD, "DeepSpeedZeRoOffload")
        if offload is not None:
            for name, (label, backward) in MODULE_HOOKS.items():
                self._wrap(offload, name, self._module_hook(label, backward))
        coordinator = _class(COORDINATOR, "PartitionedParameterCoordinator")
        if coordinator is not None:
            self._wrap(coordinator, GATHER, self._gather)
        stage3 = _class(STAGE3, "DeepSpeedZeroOptimizer_Stage3")
        if stage3 is not None:
            self._wrap(stage3, REDUCE3, self._reduce3)
        stage12 = _class(STAGE12, "DeepSpeedZeroOptimizer")
        if stage12 is not None:
            self._wrap(stage12, "reduce_ipg_grads", self._reduce12)

    def _wrap(self, cls: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        original = cls.__dict__.get(name)
        if callable(original):
            self.saved.append((cls, name, original))
            wrapped = make(original)
            wrapped.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(cls, name, wrapped)

    # --- ZeRO-3: a module's fetch and release, where its hook runs -------------
    def _module_hook(self, label: str, backward: bool) -> Callable[[Callable], Callable]:
        hub = self.hub

        def make(original: Callable) -> Callable:
            def wrapped(offload: Any, sub_module: Any, *args: Any, **kwargs: Any) -> Any:
                if not hub.active:
                    return original(offload, sub_module, *args, **kwargs)
                fid = None  # none: DeepSpeed's call alone, outside our handler
                try:
                    running = hub.thread_state().sharding
                    fid = self._frame(label, backward)
                except Exception as exc:
                    hub.fail(exc, "zero")
                if fid is None:
                    return original(offload, sub_module, *args, **kwargs)
                call = (offload, sub_module, *args)
                if backward:
                    # inside DeepSpeed's autograd function, which the operator
                    # capture has placed: right under it
                    return self._inside(running, sub_module, fid, original, call, kwargs)
                # the fetch stands in the module's call: its parent is the module's context
                owner = sub_module if label == "ZeRO::pre_forward" else None
                return self._run(running, sub_module, fid, INNERMOST, original, call, kwargs, owner)

            return wrapped

        return make

    def _gather(self, original: Callable) -> Callable:
        """The coordinator's gather: in place for the module being fetched, else
        a prefetch, named by the modules it gathers for."""
        hub = self.hub

        def wrapped(coordinator: Any, params: Any, forward: bool, *args: Any, **kwargs: Any) -> Any:
            call = (coordinator, params, forward, *args)  # DeepSpeed's own, as given
            if not hub.active:
                return original(*call, **kwargs)
            fid = None  # none: DeepSpeed's call alone, outside our handler
            try:
                running = hub.thread_state().sharding
                issuer = running[-1] if running else None
                listed = list(params)
                model = self._model(listed)
                if model is not None and not _own(issuer, listed):  # else the issuer's own fetch
                    target = model.common(listed)
                    pass_type = "forward" if forward else "backward"
                    detail = self._bucket([model.params.get(id(p), "") for p in listed])
                    if issuer is not None:
                        detail += f", issued in {self._name(issuer)}"
                    # On the native path the issuer's fetch runs inside an operator
                    # the capture times (its region, DeepSpeed's autograd function):
                    # placed elsewhere, this time would be billed twice. It stays
                    # in the issuer's fetch, its frame naming what it gathers.
                    nested = hub.window.capture == "native" or target is issuer
                    parent = INNERMOST if nested else self._parent(target, not forward)
                    fid = self._frame(f"ZeRO::{pass_type}_prefetch", not forward, detail)
            except Exception as exc:
                hub.fail(exc, "zero")
            if fid is None:
                return original(*call, **kwargs)
            return self._placed(running, target, fid, parent, original, call, kwargs)

        return wrapped

    def _reduce3(self, original: Callable) -> Callable:
        """ZeRO-3's reduce-scatter of a bucket: under the bucket's modules in backward."""
        hub = self.hub

        def wrapped(optimizer: Any, dtype: Any, *args: Any, **kwargs: Any) -> Any:
            call = (optimizer, dtype, *args)
            if not hub.active:
                return original(*call, **kwargs)
            fid = None  # none: DeepSpeed's call alone, outside our handler
            try:
                running = hub.thread_state().sharding
                bucket = getattr(optimizer, "ipg_buckets", {}).get(dtype)
                params = list(getattr(bucket, "params", ()))
                model = self._model(params)
                target = model.common(params) if model is not None else None
                if target is not None:
                    names = [model.params.get(id(p), "") for p in params]
                    # In a gradient's hook on the native path the capture times the
                    # autograd operator around it: a scope placed elsewhere would
                    # bill this time twice, so it stays under that operator.
                    inside = hub.window.capture == "native" and _current_node() is not None
                    parent = INNERMOST if inside else self._parent(target, True)
                    fid = self._frame("ZeRO::reduce_scatter_grads", True, self._bucket(names))
            except Exception as exc:
                hub.fail(exc, "zero")
            if fid is None:
                return original(*call, **kwargs)
            return self._placed(running, target, fid, parent, original, call, kwargs)

        return wrapped

    def _reduce12(self, original: Callable) -> Callable:
        """ZeRO-1/2's reduction of a bucket: where it is issued, naming its modules."""
        hub = self.hub

        def wrapped(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            call = (optimizer, *args)
            if not hub.active:
                return original(*call, **kwargs)
            fid = None  # none: DeepSpeed's call alone, outside our handler
            try:
                running = hub.thread_state().sharding
                groups = optimizer.bit16_groups
                params = [
                    groups[g][i]
                    for bucket in getattr(optimizer, "ipg_buckets", {}).values()
                    for g, i, _ in bucket.params
                ]
                model = self._model(params)
                names = [model.params.get(id(p), "") for p in params] if model else []
                fid = self._frame("ZeRO::reduce_bucket", True, self._bucket(names))
            except Exception as exc:
                hub.fail(exc, "zero")
            if fid is None:
                return original(*call, **kwargs)
            # in a gradient's hook (an autograd operator) or the engine's backward
            return self._inside(running, optimizer, fid, original, call, kwargs)

        return wrapped

    def _placed(
        self,
        running: list[Any],
        group: Any,
        fid: int,
        parent: int,
        func: Callable,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        """``func`` as a scope at ``fid``: right under the innermost open scope
        (`_inside`) where ``parent`` is INNERMOST, else under ``parent``."""
        if parent == INNERMOST:
            return self._inside(running, group, fid, func, args, kwargs)
        return self._run(running, group, fid, parent, func, args, kwargs)

    def _inside(
        self, running: list[Any], group: Any, fid: int, func: Callable, args: tuple, kwargs: dict
    ) -> Any:
        """``func`` as a scope at ``fid`` right under the innermost open scope
        (an operator the capture placed, a phase), with no Python frames."""
        running.append(group)
        try:
            return self.placed.call((fid,), func, args, kwargs)
        finally:
            running.pop()

    def _forward(self, original: Callable) -> Callable:
        """The engine's forward: learns the engine's model once per window."""
        hub = self.hub

        def wrapped(engine: Any, *args: Any, **kwargs: Any) -> Any:
            if hub.active and not any(model.engine is engine for model in self._models):
                try:
                    self._models.append(_Model(engine, hub.frames.naming_root))
                    self._entry = _settings(engine)
                except Exception as exc:
                    hub.fail(exc, "zero")
            return original(engine, *args, **kwargs)

        return wrapped

    def environment(self) -> dict[str, str]:
        """The profile's ``zero`` entry: the ZeRO settings of the engine that
        ran (stage, dtype, the settings advice names); empty without one."""
        return {ZERO_ENV: self._entry} if self._entry else {}

    # --- parameters to modules ----------------------------------------------
    def _model(self, params: list[Any]) -> _Model | None:
        """The model holding ``params`` (judged by the first)."""
        if params:
            for model in self._models:
                if id(params[0]) in model.owners:
                    return model
        return None

    def _name(self, module: Any) -> str:
        for model in self._models:
            if module in model.names:
                return model.names[module] or "the root"
        return type(module).__name__

    def _bucket(self, names: list[str]) -> str:
        """A bucket's detail: its parameter count and its modules (the first few)."""
        modules = sorted({name.rpartition(".")[0] or "the root" for name in names}, key=_natural)
        shown = ", ".join(modules[:LISTED]) + (" …" if len(modules) > LISTED else "")
        return f"{len(names)} parameters of {shown}"


def _settings(engine: Any) -> str:
    """The engine's ZeRO stage, dtype and communication settings, by the
    names of DeepSpeed's config (`dc_core.model.comm.ZERO_SETTINGS`)."""
    dtype = (
        "bfloat16"
        if engine.bfloat16_enabled()
        else "float16"
        if engine.fp16_enabled()
        else "float32"
    )
    stage = int(engine.zero_optimization_stage())
    # the engine's accessors of its config, one per setting
    read = {
        "overlap_comm": engine.zero_overlap_comm,
        "reduce_bucket_size": engine.zero_reduce_bucket_size,
        "stage3_prefetch_bucket_size": engine.zero_prefetch_bucket_size,
        "stage3_max_live_parameters": engine.zero_max_live_parameters,
        "stage3_max_reuse_distance": engine.zero_max_reuse_distance,
        "stage3_param_persistence_threshold": engine.zero_param_persistence_threshold,
    }
    settings = {
        key: accessor()
        for key, accessor in read.items()
        if stage == 3 or not key.startswith("stage3_")
    }
    return zero_entry(stage, dtype, settings)


def _natural(name: str) -> list[tuple[int, int | str]]:
    """Sort key putting ``blocks.2`` before ``blocks.10``."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in name.split(".")]


def _own(module: Any, params: list[Any]) -> bool:
    """Whether ``params`` are ``module``'s own fetch: its direct parameters (its
    whole subtree's for a module ZeRO-3 treats as a leaf)."""
    if module is None:
        return False
    mine = {id(p) for p in module.parameters(recurse=bool(getattr(module, "_z3_leaf", False)))}
    return all(id(p) in mine for p in params)


class _Model:
    """An engine's modules: each parameter's owning module, each module's name
    as the profile's module frames have it (from ``naming_root`` where that is
    one of the engine's modules, else from the engine, the outermost module)."""

    def __init__(self, engine: Any, naming_root: Any) -> None:
        self.engine = engine
        root = engine
        if naming_root is not None and any(m is naming_root for m in engine.modules()):
            root = naming_root
        self.names: dict[Any, str] = {m: n for n, m in root.named_modules(remove_duplicate=False)}
        self.by_name = {n: m for m, n in self.names.items()}
        self.owners = {id(p): m for m in self.names for p in m.parameters(recurse=False)}
        self.params = {id(p): n for n, p in root.named_parameters(remove_duplicate=False)}

    def common(self, params: list[Any]) -> Any:
        """The nearest module whose subtree holds every one of ``params``."""
        common: list[str] | None = None
        for param in params:
            module = self.owners.get(id(param))
            if module is None:
                continue
            path = self.names[module].split(".") if self.names[module] else []
            if common is None:
                common = path
                continue
            n = 0
            while n < min(len(common), len(path)) and common[n] == path[n]:
                n += 1
            del common[n:]
        return None if common is None else self.by_name.get(".".join(common))
