"""FSDP1's work (the ``FullyShardedDataParallel`` wrapper) under the unit whose parameters it moves.

``FullyShardedDataParallel``, what Lightning's ``FSDPStrategy`` and
accelerate's ``fsdp=`` wrap a model in, keeps each unit's parameters in one
flat parameter (the unit's ``FlatParamHandle``) and runs its machinery in
functions of ``torch.distributed.fsdp._runtime_utils``: gathering the unit's
parameters in its pre-forward and again in the hook on its outputs that opens
its backward, resharding after, reducing its gradient in the hook autograd
runs once the flat parameter's gradient is in, and prefetching another unit's
parameters from inside one unit's hook. Left alone, that work lands where the
calling thread happens to be: the backward gathers inside the operator whose
gradient hook ran them, under the *next* unit, the reductions inside an
operator of the unit, all of it read as the model's compute.

While a window is open those functions are wrapped (module attributes, in
both modules that call them by name, put back when it closes) so that each
runs as a ``sharding`` frame named as FSDP1's own records name it
(``FullyShardedDataParallel._pre_forward``), under the unit's context: in
forward where its call stands, in backward that context mirrored under the
backward phase and flagged ``backward``, as autograd's operators are. A
prefetch (an ``_unshard`` of another unit's handle) goes under the unit it
gathers for, its frame's detail naming the unit whose hook issued it. The
collectives issued inside (``dc_torch.collectives``) nest under these frames.

The hook that reduces a unit's gradient is bound once, when the unit first
runs forward (maybe before any window), so its two parts are wrapped
instead: the reshard (``_post_backward_reshard``, which also prefetches) and
the reduction (``_reduce_grad``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import INNERMOST
from dc_core.model.comm import FSDP1_ENV, fsdp1_entry
from dc_torch.sharding import ShardingHooks
from dc_torch.state import unwrapped_path

if TYPE_CHECKING:
    from dc_torch.hub import Hub

RUNTIME = "torch.distributed.fsdp._runtime_utils"
#: The wrapper's own module, which imports some of the runtime's functions by name.
WRAPPER = "torch.distributed.fsdp.fully_sharded_data_parallel"
#: FSDP1's records' prefix: its frames are named as its records are.
RECORD = "FullyShardedDataParallel."
#: Functions wrapped: name -> (whether it runs in backward, where the unit's
#: handle is among its arguments).
FUNCTIONS = {
    "_pre_forward": (False, 1),
    "_post_forward": (False, 1),
    "_pre_backward_hook": (True, 2),
    "_post_backward_reshard": (True, 1),
    "_reduce_grad": (True, 1),
    "_reduce_grad_no_shard": (True, 1),
}
#: The gather of a handle's parameters: a prefetch where another unit's work calls it.
UNSHARD = "_unshard"
_current_node = torch._C._current_autograd_node


class WrapperShardingHooks(ShardingHooks):
    """Wraps FSDP1's runtime functions for one adapter's hub, per window."""

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub)
        self._units: dict[int, str] = {}  # id(handle) -> its unit's name, from the root
        self._entry = ""  # the last root's settings (`environment`)

    def install(self) -> None:
        runtime = sys.modules.get(RUNTIME)
        if runtime is None:
            return
        self.contexts, self._units = {}, {}
        wrapper = sys.modules.get(WRAPPER)
        for name, (backward, handle_at) in FUNCTIONS.items():
            self._wrap(runtime, wrapper, name, self._function(name, backward, handle_at))
        self._wrap(runtime, wrapper, UNSHARD, self._unshard)

    def _wrap(
        self, runtime: Any, wrapper: Any, name: str, make: Callable[[Callable], Callable]
    ) -> None:
        """``name`` of the runtime wrapped, where the wrapper module holds the same function too."""
        original = getattr(runtime, name, None)
        if not callable(original):
            return
        wrapped = make(original)
        wrapped.__wrapped__ = original  # type: ignore[attr-defined]
        for module in (runtime, wrapper):
            if module is not None and getattr(module, name, None) is original:
                self.saved.append((module, name, original))
                setattr(module, name, wrapped)

    def _function(
        self, name: str, backward: bool, handle_at: int
    ) -> Callable[[Callable], Callable]:
        hub = self.hub
        label = RECORD + name
        owns = name == "_pre_forward"  # its node's parent is the unit's context from then on

        def make(original: Callable) -> Callable:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if not hub.active:
                    return original(*args, **kwargs)
                fid = None  # none: FSDP's call alone, outside our handler
                try:
                    handle = args[handle_at]
                    # the unit (its handle; the root without parameters of its own: its state)
                    unit = handle if handle is not None else args[0]
                    if not _skipped(name, handle):
                        running = hub.thread_state().sharding
                        # forward work stands in the unit's call: found from there
                        parent = self._parent(unit, True) if backward else INNERMOST
                        if owns:
                            self._name_units(args[0])
                        fid = self._frame(label, backward)
                except Exception as exc:
                    hub.fail(exc, "sharding")
                if fid is None:
                    return original(*args, **kwargs)
                owner = unit if owns else None
                return self._run(running, unit, fid, parent, original, args, kwargs, owner)

            return wrapped

        return make

    def _unshard(self, original: Callable) -> Callable:
        """A gather of ``handle``'s parameters: inside the unit's own work its
        own (nothing of ours), in another unit's a prefetch, under the unit it
        gathers for."""
        hub = self.hub

        def wrapped(state: Any, handle: Any, *args: Any, **kwargs: Any) -> Any:
            call = (state, handle, *args)
            if not hub.active:
                return original(*call, **kwargs)
            fid = None  # none: FSDP's call alone, outside our handler
            try:
                running = hub.thread_state().sharding
                if handle is not None and running and running[-1] is not handle:
                    fid, parent = self._prefetch_frame(running[-1], handle)
            except Exception as exc:
                hub.fail(exc, "sharding")
            if fid is None:
                return original(*call, **kwargs)
            return self._run(running, handle, fid, parent, original, call, kwargs)

        return wrapped

    def _prefetch_frame(self, issuer: Any, handle: Any) -> tuple[int, int]:
        """The frame of a prefetch of ``handle``'s parameters that ``issuer``'s
        work issues, and where it goes: under the unit it gathers for."""
        # FSDP sets the target's state for the pass it prefetches for; the
        # issuer's says whether its pre- or its post-backward hook runs
        backward = _state(handle).startswith("BACKWARD")
        when = (
            "post_backward"
            if _state(issuer) == "BACKWARD_POST"
            else "pre_backward"
            if backward
            else "pre_forward"
        )
        detail = f"issued in {self._units.get(id(issuer), 'the root')}"
        fid = self._frame(f"{RECORD}_{when}_prefetch", backward, detail)
        return fid, self._parent(handle, backward)

    def _name_units(self, state: Any) -> None:
        """Each unit's name under the FSDP root ``state`` (a root's
        ``_pre_forward`` runs first in its forward), once per window: a
        prefetch's detail names the unit that issued it."""
        if not getattr(state, "_is_root", False) or id(getattr(state, "_handle", None)) in (
            self._units
        ):
            return
        for name, module in state.named_modules():
            handle = getattr(module, "_handle", None)
            if handle is not None:
                self._units[id(handle)] = unwrapped_path(name) or "the root"
        self._entry = fsdp1_entry(_settings(state))

    def environment(self) -> dict[str, str]:
        """The profile's ``fsdp`` entry: the settings of the FSDP1 root that
        ran (strategy, prefetching, the parameters' dtype); empty without one."""
        return {FSDP1_ENV: self._entry} if self._entry else {}


def _settings(state: Any) -> dict[str, object]:
    """The root's settings that decide its communication, by the names of
    ``FullyShardedDataParallel``'s arguments (`dc_core.model.comm.FSDP1_SETTINGS`);
    those the state lacks are left out."""

    def named(value: Any) -> object:
        return getattr(value, "name", value)  # an enum by its member's name

    out = {
        key: named(getattr(state, attribute))
        for key, attribute in (
            ("sharding_strategy", "sharding_strategy"),
            ("forward_prefetch", "forward_prefetch"),
            ("backward_prefetch", "backward_prefetch"),
            ("limit_all_gathers", "limit_all_gathers"),
            ("use_orig_params", "_use_orig_params"),
        )
        if hasattr(state, attribute)
    }
    dtype = getattr(getattr(state, "mixed_precision", None), "param_dtype", None)
    # without mixed precision the parameters keep their own dtype
    out["param_dtype"] = str(dtype).removeprefix("torch.") if dtype is not None else "unchanged"
    return out


def _skipped(name: str, handle: Any) -> bool:
    """Calls that do no work of their own: the pre-backward hook after the
    unit's first output has run it (FSDP returns at once, unrecorded), and a
    pre-forward in backward (an activation checkpoint's recompute)."""
    if name == "_pre_backward_hook":
        return handle is not None and bool(getattr(handle, "_ran_pre_backward_hook", False))
    if name == "_pre_forward":
        return _current_node() is not None
    return False


def _state(handle: Any) -> str:
    """A handle's training state's name (``FORWARD``, ``BACKWARD_PRE`` …), "" if none."""
    return getattr(getattr(handle, "_training_state", None), "name", "")
