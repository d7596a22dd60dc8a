"""Per-thread state of the PyTorch adapter, and the frames it interns.

Kept apart from the hooks so each hook module reads one small object.
"""

from __future__ import annotations

import threading
from typing import Any

from dc_core.collect.collector import FLAG_BACKWARD, KIND_KERNEL, KIND_MODULE, KIND_OPERATOR

_OUTSIDE = -1  # cached for a module that is not one of the naming root's


class ThreadState(threading.local):
    """What one thread is inside of while a window is open. Operators and
    compiled regions mark their autograd nodes with their own scope node
    (``autograd.NodeHooks.tag``), so no context paths are kept here."""

    def __init__(self) -> None:
        self.generation = -1
        self.reset(-1)

    def reset(self, generation: int) -> None:
        self.generation = generation
        self.modules: list[Any] = []
        self.phases: list[
            Any
        ] = []  # open phase context managers (optimizer, dataloader), with the step each began in
        self.set_aside: list[tuple] = []  # our modes popped while a compiled module runs
        self.mode_depth = (
            0  # Module.train calls running (model.eval() recurses into every submodule)
        )
        self.evaluating: tuple[Any, Any, int] | None = (
            None  # (model, its eval phase, the step it began in)
        )
        self.hooked: list[
            bool
        ] = []  # per running autograd node: whether its pre-hook opened a scope
        # per backward pass running on this thread, innermost last: (graph task
        # id, collector depth its node scopes sit on)
        self.passes: list[tuple[int, int]] = []
        # FSDP parameter groups whose work (dc_torch.sharding) runs on this
        # thread, innermost last: collectives issued there nest in that scope
        self.sharding: list[Any] = []


class Frames:
    """Frame ids for operators, kernels and modules, cached per object.

    Frame ids survive ``collector.reset()``, so these caches live as long as
    the session's collector.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self.ops: dict[
            Any, int
        ] = {}  # torch callable -> frame id, or ops.SKIP / ops.BACKWARD_ENTRY
        # operator frames whose FLOPs are a matmul's (ops.matmul_flops)
        self.matmuls: set[int] = set()
        self.names: dict[int, str] = {}  # operator frame id -> name
        self.aten_ids: dict[tuple[Any, int], int] = {}
        self.backward_ops: dict[tuple[str, str], int] = {}
        self.module_names: dict[
            int, tuple[Any, dict[Any, int]]
        ] = {}  # id(root) -> (root, {module: frame})
        # The module to name modules from where it holds them (a LightningModule),
        # whatever module is called outermost; the adapter sets it (its ``naming_root``).
        self.naming_root: Any = None
        self.rooted_names: dict[
            int, tuple[Any, dict[Any, int]]
        ] = {}  # as module_names, _OUTSIDE for strays

    def op(self, name: str, flags: int = 0, detail: str = "") -> int:
        fid = self.session.frame(KIND_OPERATOR, name, "", 0, detail, flags)
        self.names[fid] = name
        return fid

    def aten(self, func: Any, flags: int) -> int:
        key = (func, flags)
        fid = self.aten_ids.get(key)
        if fid is None:
            name = str(func.overloadpacket).replace("aten.", "aten::", 1)
            fid = self.aten_ids[key] = self.op(name, flags)
        return fid

    def backward_op(self, forward_name: str, node_name: str) -> int:
        key = (forward_name, node_name)
        fid = self.backward_ops.get(key)
        if fid is None:
            fid = self.backward_ops[key] = self.op(forward_name, FLAG_BACKWARD, node_name)
        return fid

    def kernel(self, name: str, device: str) -> int:
        return self.session.frame(KIND_KERNEL, name, "", 0, device)

    def module(self, module: Any, root: Any) -> int:
        """Frame of ``module`` (class as detail), named by its dotted path from
        ``naming_root`` when it is one of that module's ``named_modules()``, else
        from ``root``, the outermost module called on this thread. Every capture
        path calls this, so all of them name a module alike."""
        if self.naming_root is not None:
            fid = self._path_frame(module, self.naming_root, self.rooted_names, _OUTSIDE)
            if fid != _OUTSIDE:
                return fid
        return self._path_frame(module, root, self.module_names, None)

    def _path_frame(
        self,
        module: Any,
        root: Any,
        cache: dict[int, tuple[Any, dict[Any, int]]],
        outside: int | None,
    ) -> int:
        """``module``'s frame under ``root``, its paths computed once per root; a
        module not registered in ``root`` gets ``outside``, or its class name when None."""
        entry = cache.get(id(root))
        if entry is None or entry[0] is not root:
            entry = cache[id(root)] = (root, {})
        frames = entry[1]
        fid = frames.get(module)
        if fid is None:
            names = {m: n for n, m in root.named_modules(remove_duplicate=False)}
            for other, name in names.items():
                if other not in frames:
                    name = unwrapped_path(name)
                    frames[other] = self.session.frame(
                        KIND_MODULE, name or _class_name(other), "", 0, _class_name(other)
                    )
            fid = frames.get(module)
            if fid is None:  # called under root but not registered in it
                fid = frames[module] = (
                    outside
                    if outside is not None
                    else self.session.frame(
                        KIND_MODULE, _class_name(module), "", 0, _class_name(module)
                    )
                )
        return fid


#: Segments that wrappers add to module paths and drop from the model's state
#: dict (FSDP1's unit wrapper, activation checkpointing's): a module frame is
#: named by the path the model's own names give.
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module"})


def unwrapped_path(name: str) -> str:
    """``name`` (as ``named_modules()`` gives it) without wrapper segments:
    ``_fsdp_wrapped_module.blocks.0._fsdp_wrapped_module.attn`` is ``blocks.0.attn``."""
    if "_wrapped_module" not in name:
        return name
    return ".".join(part for part in name.split(".") if part not in WRAPPER_SEGMENTS)


def _class_name(module: Any) -> str:
    inner = getattr(module, "_orig_mod", None)  # torch.compile's OptimizedModule wraps the real one
    return type(inner if inner is not None else module).__name__
