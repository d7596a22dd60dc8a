"""Operator interception at the Python → torch boundary.

A ``TorchFunctionMode`` sees every public torch call the user's code makes
(``torch.softmax``, ``F.linear``, tensor methods) once, at the outermost
level: torch pops the mode while the call runs, so nested calls are not seen
twice. Each call becomes an ``operator`` scope under the caller's Python path,
captured by the collector. This is cheaper than a ``TorchDispatchMode`` over
every ATen op (measured on the GPT benchmark workload: no-op function mode
×1.07, no-op dispatch mode ×1.14), so ATen ops are recorded only where they
are the only handle (backward) or asked for (comprehensive mode).
"""

from __future__ import annotations

from typing import Any, Callable

from threading import get_ident

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from dc_torch.autograd import BACKWARD_ENTRY_POINTS, tag_op

_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_next_seq = torch._C._autograd._get_sequence_nr
_NO_KWARGS: dict = {}  # never mutated: ``**`` unpacking copies it
_strided = torch.strided

#: Calls that only read metadata or flip state: not operators worth a node.
_PASS_THROUGH = {
    "torch.is_complex", "torch.is_floating_point", "torch.is_tensor", "torch.numel",
    "torch.Tensor.size", "torch.Tensor.dim", "torch.Tensor.numel", "torch.Tensor.stride",
    "torch.Tensor.data_ptr", "torch.Tensor.element_size", "torch.Tensor.is_contiguous",
    "torch.Tensor.is_floating_point", "torch.Tensor.is_complex", "torch.Tensor.get_device",
    "torch.Tensor.__len__", "torch.Tensor.__repr__", "torch.Tensor.__format__",
    "torch.Tensor.__hash__", "torch.Tensor.requires_grad_", "torch.Tensor.storage_offset",
    "torch.Tensor.untyped_storage", "torch.Tensor._is_view", "torch.Tensor.__reduce_ex__",
    "torch.Tensor.dim_order", "torch.Tensor.has_names", "torch.Tensor.is_set_to",
}
_MATMULS = {"torch.nn.functional.linear", "torch.matmul", "torch.Tensor.matmul", "torch.Tensor.__matmul__",
            "torch.mm", "torch.Tensor.mm", "torch.bmm", "torch.Tensor.bmm"}


def op_name(func: Callable) -> str:
    """``torch.softmax``, ``torch.nn.functional.linear``, ``torch.Tensor.add``."""
    name = resolve_name(func)
    if name:
        short = getattr(func, "__name__", None)
        if name.startswith("torch.") and name.count(".") == 1 and short and name != f"torch.{short}" \
                and getattr(torch, short, None) is func:
            return f"torch.{short}"  # torch's table names a twin for some (torch.mm -> "torch.spmm")
        return name
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None) or ""
    if module == "torch" and qualname.startswith("_VariableFunctionsClass."):
        return "torch." + qualname.split(".", 1)[1]  # torch._foreach_mul_, as the user wrote it
    return f"{module}.{qualname}" if module and not qualname.startswith(module) else qualname


def classify(adapter: Any, func: Callable) -> int:
    """Frame id of ``func``'s operator frame; -1 to pass through; -2 for backward entry points."""
    name = op_name(func)
    if func in BACKWARD_ENTRY_POINTS:
        fid = -2
    elif name in _PASS_THROUGH or name.endswith((".__get__", ".__set__", ".__delete__")) or "_set_grad_enabled" in name \
            or "profiler." in name or name.startswith("torch._C._profiler"):
        fid = -1
    else:
        fid = adapter.frames.op(name)
        if name in _MATMULS:
            adapter.matmul_frames.add(fid)
    adapter.frames.ops[func] = fid
    return fid


def output_bytes(args: tuple, out: Any) -> int:
    """Bytes of output storage the call allocated: outputs whose storage is
    not shared with a tensor argument (views and in-place results allocate nothing).

    The common cases read tensor metadata only: ``untyped_storage()`` makes a
    Python storage object that lives as long as the activation, one more
    object for the garbage collector per call."""
    if isinstance(out, _Tensor):
        for arg in args:
            if out is arg:  # in-place, or returned as is
                return 0
        base = out._base
        if base is None:  # owns its storage (a view or an in-place result would not)
            return out.nbytes if out.layout == _strided else 0
        for arg in args:
            if arg is base or (isinstance(arg, _Tensor) and arg._base is base):
                return 0  # a view of an argument
        return _storage_bytes(args, out)
    if isinstance(out, (tuple, list)):
        seen: set[int] = set()
        total = 0
        for o in out[:16]:
            if isinstance(o, _Tensor) and o.layout == _strided:
                ptr = o.untyped_storage().data_ptr()
                if ptr not in seen:
                    seen.add(ptr)
                    total += output_bytes(args, o)
        return total
    return 0


def _storage_bytes(args: tuple, out: Any) -> int:
    """A view of something that is not an argument: new unless it shares an argument's storage."""
    if out.layout != _strided:
        return 0
    storage = out.untyped_storage()
    ptr = storage.data_ptr()
    for arg in args:
        if isinstance(arg, _Tensor) and arg.layout == _strided and arg.untyped_storage().data_ptr() == ptr:
            return 0
    return storage.nbytes()


def matmul_flops(args: tuple, out: Any) -> int:
    """2·M·N·K for matmul-like calls: out elements × the contracted size × 2."""
    if isinstance(out, _Tensor) and args and isinstance(args[0], _Tensor) and args[0].dim() > 0:
        return 2 * out.numel() * args[0].shape[-1]
    return 0


class OperatorMode(TorchFunctionMode):
    """Records each torch call as an operator scope while a window is open.

    The hot path is written flat on purpose (cached attributes, no helper
    calls on the common path): it runs for every torch call in a window.
    """

    def __init__(self, adapter: Any) -> None:
        super().__init__()
        self.adapter = adapter
        self.ops = adapter.frames.ops
        self.state = adapter.thread_state
        self.collector = adapter.collector
        self.matmuls = adapter.matmul_frames
        self.hooks = adapter.backward.hooks
        self.device = adapter.device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        # Under dynamo tracing is_compiling() folds this to a plain call before
        # any of our state is read, so nothing of ours is traced or guarded on.
        # Metadata reads (half the calls in an optimizer step) leave next.
        if _is_compiling():
            return func(*args, **kwargs)
        fid = self.ops.get(func)
        a = self.adapter
        if fid == -1 or not a.active:
            return func(*args, **kwargs)
        # The user's call runs exactly once, outside every ``except`` of ours:
        # only what the profiler's own lines raise is the profiler's.
        node = -1
        try:
            if fid is None:
                fid = classify(a, func)
            if fid >= 0 and not (a.suspended and get_ident() in a.suspended):  # not inside a compiled region
                c = self.collector
                node = c.enter((fid,), -1, True)  # capture and enter in one native call
                marker = self.device.mark(node) if self.device.on else None
                first_seq = _next_seq() if _grad_enabled() else -1
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            a.fail(exc, "operator")
            return func(*args, **kwargs)
        if node < 0:
            if fid == -2:
                return a.backward.run(func, args, kwargs)
            return func(*args, **kwargs)
        try:
            out = func(*args, **kwargs)
        finally:
            a.leave(marker, "operator")
        try:
            # In-place calls (most of an optimizer step) return their first argument.
            # On CUDA, Kineto's memory events give alloc_bytes instead.
            if marker is None and a.cpu_shapes and not (args and out is args[0]):
                size = output_bytes(args, out)
                if size:
                    c.add(node, a.metric_alloc, size)
            if fid in self.matmuls and a.cpu_shapes:
                c.add(node, a.metric_flops, matmul_flops(args, out))
            if first_seq >= 0 and isinstance(out, (_Tensor, tuple, list)):
                tag_op(out, node, fid, first_seq, self.hooks)
        except Exception as exc:  # noqa: BLE001
            a.fail(exc, "operator")
        return out
