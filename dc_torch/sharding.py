"""FSDP2's own work under the module whose parameters it moves.

``fully_shard`` runs its machinery in methods of each module's parameter
group (``FSDPParamGroup``): gathering the group's parameters before the
module's forward and again before its backward, resharding after, reducing
its gradients after its backward, and prefetching the *next* group's
parameters from inside another module's hook. Left alone, that work and the
collectives it issues land under whatever the calling thread was in: the
backward phase's top (autograd runs the hooks), the module that happened to
be running (a prefetch), an autograd function FSDP registers.

While a window is open these methods are wrapped (class attributes, put back
when it closes) so that each runs as a ``sharding`` frame named as FSDP's own
records name it (``FSDP::pre_forward``) under the context of the module the
group belongs to: in forward where the module's call stands, in backward that
context mirrored under the backward phase and flagged ``backward``, as
autograd's operators are. A prefetch goes under the module it gathers for;
its frame's detail says which module's hook issued it. The collectives
issued inside (``dc_torch.collectives``) nest under that frame, with their
time, bytes and exposed wait.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dc_core.collect.collector import FLAG_BACKWARD, INNERMOST, KIND_SHARDING, MEASURE
from dc_torch.hub import Interceptor

if TYPE_CHECKING:
    from dc_torch.hub import Hub

#: Where FSDP2 keeps its parameter groups (imported by ``fully_shard``).
GROUPS = "torch.distributed.fsdp._fully_shard._fsdp_param_group"

#: Group methods wrapped: name -> (frame name, whether it runs in backward,
#: whether the native capture already places it). The frame names are FSDP's
#: own record names. Backward work is placed at the group's context, except
#: on the native path ``post_backward``: it runs inside FSDP's own autograd
#: function (``RegisterPostBackwardFunction``), which the operator capture
#: already puts under the module's mirrored context, and a scope placed beside
#: that operator would bill its time twice.
METHODS = {
    "pre_forward": ("FSDP::pre_forward", False, True),
    "post_forward": ("FSDP::post_forward", False, True),
    "pre_backward": ("FSDP::pre_backward", True, False),
    "post_backward": ("FSDP::post_backward", True, True),
    "finalize_backward": ("FSDP::finalize_backward", True, False),
}
#: The prefetch (a static method: ``_prefetch_unshard(target, pass_type)``).
PREFETCH = "_prefetch_unshard"


def _group_class() -> Any:
    """FSDP2's parameter-group class where ``fully_shard`` has been imported, else None."""
    groups = sys.modules.get(GROUPS)
    return getattr(groups, "FSDPParamGroup", None)


class ShardingHooks:
    """Wraps FSDP2's parameter-group methods for one adapter's hub, per window."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.saved: list[tuple[Any, str, Any]] = []  # (class, attribute, original)
        # per group: its module's forward context node in this window
        self.contexts: dict[int, int] = {}
        self._fids: dict[tuple[str, str, bool], int] = {}
        # in forward: under the module's call, found from the caller's frames
        # (on the native path as an operator's are); the node it lands under is
        # the group's context from then on
        self.here = Interceptor(hub, "sharding", capture=True, marks=True, after=self._placed_here)
        # placed at a node: a module's context, mirrored for backward
        self.placed = Interceptor(hub, "sharding", user_depth=MEASURE, marks=True)

    def install(self) -> None:
        cls = _group_class()
        if cls is None:
            return
        self.contexts = {}
        native = self.hub.window.capture == "native"
        for name, (label, backward, found) in METHODS.items():
            original = cls.__dict__.get(name)
            if original is not None:
                self.saved.append((cls, name, original))
                placed = backward and not (native and found)
                setattr(cls, name, self._method(original, label, backward, placed))
        prefetch = cls.__dict__.get(PREFETCH)
        if isinstance(prefetch, staticmethod):
            self.saved.append((cls, PREFETCH, prefetch))
            setattr(cls, PREFETCH, staticmethod(self._prefetch(prefetch.__func__)))

    def environment(self) -> dict[str, str]:
        """The profile's environment entries of the runtime's settings (none for FSDP2)."""
        return {}

    def uninstall(self) -> None:
        saved, self.saved = self.saved, []
        for cls, name, original in reversed(saved):
            setattr(cls, name, original)

    # --- placement -------------------------------------------------------
    def _frame(self, label: str, backward: bool, detail: str = "") -> int:
        key = (label, detail, backward)
        fid = self._fids.get(key)
        if fid is None:
            fid = self._fids[key] = self.hub.session.frame(
                KIND_SHARDING, label, "", 0, detail, FLAG_BACKWARD if backward else 0
            )
        return fid

    def _parent(self, group: Any, backward: bool) -> int:
        """Where ``group``'s work goes: its module's forward context (mirrored
        under the backward phase for backward work), or, before the module has
        run forward in this window, INNERMOST (found from the caller)."""
        context = self.contexts.get(id(group))
        if context is None:
            return INNERMOST
        if not backward:
            return context
        hub = self.hub
        return hub.collector.mirror(context, hub.backward_root())

    def _run(
        self,
        running: list[Any],
        group: Any,
        fid: int,
        parent: int,
        func: Callable,
        args: tuple,
        kwargs: dict,
        owner: Any = None,
    ) -> Any:
        """``func`` as a scope at ``fid`` under ``parent``, or where the caller
        stands (INNERMOST: inside a scope of ours, right under it), with
        ``group`` on this thread's ``running`` groups; ``owner``: the group
        whose context that tells."""
        nested = bool(running)
        running.append(group)
        try:
            if parent != INNERMOST or nested:
                return self.placed.call((fid,), func, args, kwargs, None, parent)
            # in the module's call: the Python path's module hooks have opened
            # its scope; the native path reads it from the caller's stack
            return self.here.call((fid,), func, args, kwargs, owner)
        finally:
            running.pop()

    def _placed_here(
        self, node: int, frames: Any, owner: Any, args: tuple, kwargs: dict, out: Any
    ) -> None:
        if owner is not None:
            self.contexts[id(owner)] = self.hub.collector.parent(node)

    def _method(self, original: Callable, label: str, backward: bool, placed: bool) -> Callable:
        hub = self.hub

        def wrapped(group: Any, *args: Any, **kwargs: Any) -> Any:
            if not hub.active:
                return original(group, *args, **kwargs)
            fid = None  # none: FSDP's call alone, outside our handler
            try:
                running = hub.thread_state().sharding
                # forward work stands in the module's call: found from there
                parent = self._parent(group, backward) if placed else INNERMOST
                fid = self._frame(label, backward)
            except Exception as exc:
                hub.fail(exc, "sharding")
            if fid is None:
                return original(group, *args, **kwargs)
            owner = None if backward else group
            return self._run(running, group, fid, parent, original, (group, *args), kwargs, owner)

        wrapped.__wrapped__ = original  # type: ignore[attr-defined]
        return wrapped

    def _prefetch(self, original: Callable) -> Callable:
        hub = self.hub

        def wrapped(target: Any, pass_type: str, *args: Any, **kwargs: Any) -> Any:
            if not hub.active:
                return original(target, pass_type, *args, **kwargs)
            fid = None  # none: FSDP's call alone, outside our handler
            try:
                backward = pass_type == "backward"
                running = hub.thread_state().sharding
                issuer = running[-1] if running else None
                detail = f"issued in {_path(issuer)}" if issuer is not None else ""
                parent = self._parent(target, backward)
                fid = self._frame(f"FSDP::{pass_type}_prefetch", backward, detail)
            except Exception as exc:
                hub.fail(exc, "sharding")
            if fid is None:
                return original(target, pass_type, *args, **kwargs)
            return self._run(
                running, target, fid, parent, original, (target, pass_type, *args), kwargs
            )

        wrapped.__wrapped__ = original  # type: ignore[attr-defined]
        return wrapped


def _path(group: Any) -> str:
    """A parameter group's module path as FSDP names it (the root's is empty)."""
    return getattr(group, "_module_fqn", "") or "the root"
