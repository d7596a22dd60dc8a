"""Memory by context for one window: the allocator's reports, and what each block is.

The allocators (c10's CPU allocator and CUDA caching allocator) report every
allocation and free to the reporter the extension pushes on the training
thread (``dc_torch/csrc/capture.cc``); the collector bills each to the
calling thread's innermost recorded operator and keeps the live map, the
peak and the timeline (``native/memory.h``). What this module adds is what
the blocks are, told by torch itself:

- ``saved_for_backward``: the tensors autograd keeps for the backward, as
  its saved-tensor pack hook sees them (exactly these: a checkpointed
  region's own hooks take its tensors, which are then not saved);
- ``parameter``, ``gradient``, ``optimizer_state``: at each optimizer step,
  the optimizer's parameters (and the buffers of the modules that ran:
  model state too), their gradients and its state. Blocks made in the
  window are marked where they are (the mark moves their bytes at the peak
  too); blocks made before it join the live map as resident, billed to
  their module under the phase that uses them (forward, backward,
  optimizer);
- ``input``: the batches a DataLoader gives in the window.

Everything else is ``temporary``. A torch.profiler started inside the window
takes the allocator's reporting slot over: the tracking stops there, and the
profile says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from dc_core.collect.collector import ROOT_NODE
from dc_torch.optimizer_hooks import OptimizerHooks

if TYPE_CHECKING:
    from dc_torch.hub import Hub

logger = logging.getLogger("deepcontext")

# native/memory.h's MemCategory
TEMPORARY, PARAMETER, GRADIENT, OPTIMIZER_STATE, SAVED_FOR_BACKWARD, INPUT = range(6)
#: Most blocks kept live at once; past it a block counts in ``live_dropped``.
MAX_LIVE = 1 << 20
#: Timeline points per device, however long the window.
TIMELINE_POINTS = 256


class MemoryHooks:
    """Starts and stops memory tracking for a window on the native capture path."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.on = False  # tracking now
        self.collected = False  # the window tracked memory (for some or all of it)
        self.note = ""  # why memory was not (or not wholly) collected
        self.device_note = ""  # what the window left out for memory's sake (set by the adapter)
        self._saved: Any = None  # the saved-tensor hooks' context
        self._optimizer = OptimizerHooks()
        self._patched: Any = None  # torch.autograd.profiler._enable_profiler, as it was
        self._resident: set[int] = set()  # data pointers held this window
        self._optimizers: dict[int, int] = {}  # optimizer id -> state entries classified
        self._classified: set[int] = set()  # optimizers whose parameters are classified
        self._owners: dict[int, int] | None = None  # parameter id -> its module's frame
        self._owners_named = 0  # modules named when it was made
        self._nodes: dict[tuple[str, int], int] = {}  # (phase, module frame) -> node

    def install(self) -> None:
        """Turn tracking on; leaves ``on`` False and says why in ``note`` when it cannot."""
        hub = self.hub
        self.on, self.collected, self.note = False, False, ""
        left_out, self.device_note = self.device_note, ""
        self._resident.clear()
        self._nodes.clear()
        self._optimizers.clear()
        self._classified.clear()
        self._owners = None
        native = hub.native
        if native is None or native.collector is None:
            self.note = "memory is read on the native capture path only"
            return
        c = hub.collector
        c.memory_start(MAX_LIVE, TIMELINE_POINTS)
        if not native.extension.memory_start():
            c.memory_stop()
            self.note = "a torch.profiler session holds the allocator's reporting"
            return
        self.on = self.collected = True
        self.note = left_out
        self._patch_profiler()
        try:
            extension = native.extension
            self._saved = torch.autograd.graph.saved_tensors_hooks(
                extension.pack_saved, extension.same
            )
            self._saved.__enter__()
        except RuntimeError as exc:  # the user disabled saved-tensor hooks
            self._saved = None
            self.note = f"saved_for_backward not told apart: {exc}"
        self._optimizer.register(self._before_step, self._after_step)

    def uninstall(self) -> bool:
        """Stop tracking (what was tracked stays readable) and take every hook out;
        False while the optimizer hooks must wait (`OptimizerHooks`): `restore` then."""
        self._stop()
        return self.restore()

    def restore(self) -> bool:
        """Take out what `uninstall` left; True when nothing is left."""
        return self._optimizer.remove()

    def _stop(self) -> None:
        saved, self._saved = self._saved, None
        if saved is not None:
            saved.__exit__(None, None, None)
        self._unpatch_profiler()
        if not self.on:
            return
        self.on = False
        native = self.hub.native
        if native is not None and not native.extension.memory_stop():
            logger.warning(
                "deepcontext: the memory reporter could not be taken off its thread; it stays inert"
            )
        self.hub.collector.memory_stop()

    # --- what blocks are ------------------------------------------------------
    def batch_seen(self, batch: Any) -> None:
        """A DataLoader gave ``batch``: its tensors' blocks are the step's ``input``."""
        if self.on:
            try:
                tensors = list(_tensors(batch))
                if tensors:
                    self.hub.native.extension.mark_blocks(tensors, INPUT)
            except Exception as exc:
                self.hub.fail(exc, "input mark")

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.on:
            try:
                params = list(_params(optimizer))
                if id(optimizer) not in self._classified:
                    # parameters keep their blocks: once per window
                    self._classified.add(id(optimizer))
                    self._classify(params, PARAMETER, "forward")
                    self._hold_buffers()
                # gradients may be new blocks every step (zero_grad(set_to_none=True))
                self._classify(
                    [p for p in params if p.grad is not None], GRADIENT, "backward", grads=True
                )
            except Exception as exc:
                self.hub.fail(exc, "memory categories")

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.on:
            try:
                # the state keeps its blocks too: again only when it grew
                if len(optimizer.state) != self._optimizers.get(id(optimizer), 0):
                    self._optimizers[id(optimizer)] = len(optimizer.state)
                    owned = [
                        (p, t) for p, state in optimizer.state.items() for t in _tensors(state)
                    ]
                    self._classify(owned, OPTIMIZER_STATE, "optimizer", owned=True)
            except Exception as exc:
                self.hub.fail(exc, "memory categories")

    def _classify(
        self, items: list[Any], category: int, phase: str, grads: bool = False, owned: bool = False
    ) -> None:
        """Mark the blocks of ``items`` (parameters, their ``.grad`` with ``grads``,
        or ``(parameter, tensor)`` pairs with ``owned``) as ``category`` where they
        were allocated in the window; the others join as resident since the window
        began (once each), billed to their parameter's module under ``phase``."""
        if not items:
            return
        tensors = [t for _, t in items] if owned else [p.grad for p in items] if grads else items
        params = [p for p, _ in items] if owned else items
        tracked = self.hub.native.extension.mark_blocks(tensors, category)
        for param, tensor, known in zip(params, tensors, tracked):
            if not known:
                self._hold(param, tensor, category, phase)

    def _hold(self, param: Any, tensor: torch.Tensor, category: int, phase: str) -> None:
        frame = self._owners.get(id(param)) if self._owners is not None else None
        if frame is None:
            # modules are named as they run: more may be named since the last look
            named = self._named_count()
            if self._owners is None or named != self._owners_named:
                self._owners, self._owners_named = self._module_frames(), named
            frame = self._owners.get(id(param), -1)
        self._hold_at(tensor, category, phase, frame)

    def _hold_at(self, tensor: torch.Tensor, category: int, phase: str, frame: int) -> None:
        """Hold ``tensor``'s block as resident since the window began, billed to
        module ``frame`` under ``phase`` (once per block)."""
        ptr = _storage_ptr(tensor)
        if not ptr or ptr in self._resident or tensor.device.type not in _DEVICE_TYPES:
            return
        size = tensor.untyped_storage().nbytes()
        if size <= 0:
            return
        self._resident.add(ptr)
        device = tensor.device
        self.hub.collector.memory_hold(
            ptr,
            size,
            _DEVICE_TYPES[device.type],
            device.index or 0,
            self._node(phase, frame),
            category,
            True,
        )

    def _hold_buffers(self) -> None:
        """The buffers of the modules named so far (running statistics, positional
        tables) are model state beside the parameters: ``parameter`` too."""
        for module, frame in self._named_modules():
            buffers = [b for b in module.buffers(recurse=False) if b is not None]
            if not buffers:
                continue
            tracked = self.hub.native.extension.mark_blocks(buffers, PARAMETER)
            for buffer, known in zip(buffers, tracked):
                if not known:
                    self._hold_at(buffer, PARAMETER, "forward", frame)

    def _node(self, phase: str, frame: int) -> int:
        """Where a resident block is billed: its module under ``phase`` (the phase alone
        when the module is not known)."""
        node = self._nodes.get((phase, frame))
        if node is None:
            c, session = self.hub.collector, self.hub.session
            node = c.child(ROOT_NODE, session.phase_frame(phase))
            if frame >= 0:
                node = c.child(node, frame)
            self._nodes[(phase, frame)] = node
        return node

    def _named_modules(self) -> Iterator[tuple[Any, int]]:
        """(module, its frame) for the modules named so far this window."""
        frames = self.hub.frames
        for cache in (frames.module_names, frames.rooted_names):
            for _root, modules in list(cache.values()):
                yield from list(modules.items())

    def _named_count(self) -> int:
        frames = self.hub.frames
        return sum(
            len(modules)
            for cache in (frames.module_names, frames.rooted_names)
            for _root, modules in cache.values()
        )

    def _module_frames(self) -> dict[int, int]:
        """Parameter id -> frame of the module that registers it."""
        owners: dict[int, int] = {}
        for module, frame in self._named_modules():
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), frame)
        return owners

    # --- a torch.profiler started inside the window -----------------------------
    def _patch_profiler(self) -> None:
        profiler = torch.autograd.profiler
        original = getattr(profiler, "_enable_profiler", None)
        if original is None:
            return
        hooks = self

        def _enable_profiler(*args: Any, **kwargs: Any) -> Any:
            # The allocator's reporting slot is the profiler's: ours leaves it first.
            hooks._yield_to_profiler()
            return original(*args, **kwargs)

        self._patched = (original, _enable_profiler)
        profiler._enable_profiler = _enable_profiler

    def _unpatch_profiler(self) -> None:
        patched, self._patched = self._patched, None
        if patched is not None and torch.autograd.profiler._enable_profiler is patched[1]:
            torch.autograd.profiler._enable_profiler = patched[0]

    def _yield_to_profiler(self) -> None:
        if not self.on:
            return
        try:
            native = self.hub.native
            if native is not None and native.extension.memory_stop():
                self.on = False
                self.hub.collector.memory_stop()
                self.note = (
                    "a torch.profiler started inside the window took the allocator's reporting"
                )
        except Exception as exc:
            self.hub.fail(exc, "memory hand-over")


def _storage_ptr(tensor: Any) -> int:
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
        return 0
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (a functional or fake tensor)
        return 0


def _params(optimizer: Any) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]


def _tensors(state: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors in a nest of mappings, lists and tuples (a batch, an optimizer's state)."""
    if isinstance(state, torch.Tensor):
        yield state
    elif depth < 8 and isinstance(state, Mapping):
        for value in state.values():
            yield from _tensors(value, depth + 1)
    elif depth < 8 and isinstance(state, (list, tuple)):
        for value in state:
            yield from _tensors(value, depth + 1)


# c10::DeviceType numbers
_DEVICE_TYPES = {"cpu": 0, "cuda": 1, "xpu": 12, "mps": 13, "mtia": 19}
