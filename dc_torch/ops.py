"""Operator interception at the Python → torch boundary, and ATen ops below it.

A ``TorchFunctionMode`` sees every public torch call the user's code makes
(``torch.softmax``, ``F.linear``, tensor methods) once, at the outermost
level: torch pops the mode while the call runs, so nested calls are not seen
twice. Each call becomes an ``operator`` scope under the caller's Python path,
captured by the collector. This is cheaper than a ``TorchDispatchMode`` over
every ATen op (measured on the GPT benchmark workload: no-op function mode
×1.07, no-op dispatch mode ×1.14), so ATen ops are recorded only where they
are the only handle (backward) or asked for (comprehensive mode, ``AtenMode``).

Both modes wrap the call with the hub's one `Interceptor`; what they add is
which frame a call gets and what is read from its result.
"""

from __future__ import annotations

from collections.abc import Callable
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from dc_core.collect.collector import FLAG_BACKWARD, INHERIT
from dc_core.collect.ownfiles import cut_own_frames
from dc_torch.autograd import BACKWARD_ENTRY_POINTS
from dc_torch.hub import Interceptor

if TYPE_CHECKING:
    from dc_torch.hub import Hub
    from dc_torch.state import Frames

#: What ``classify`` answers instead of a frame id (cached in ``Frames.ops``):
#: a call that is not an operator of its own, run as it is (the native
#: capture's ``kSkip``) ...
SKIP = -1
#: ... and ``Tensor.backward`` / ``autograd.grad``, run inside the backward phase.
BACKWARD_ENTRY = -2

_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_next_seq = torch._C._autograd._get_sequence_nr
_current_node = torch._C._current_autograd_node
_NO_KWARGS: dict = {}  # never mutated: ``**`` unpacking copies it
_strided = torch.strided

#: Calls that only read metadata or flip state: not operators worth a node.
_PASS_THROUGH = {
    "torch.is_complex",
    "torch.is_floating_point",
    "torch.is_tensor",
    "torch.numel",
    "torch.Tensor.size",
    "torch.Tensor.dim",
    "torch.Tensor.numel",
    "torch.Tensor.stride",
    "torch.Tensor.data_ptr",
    "torch.Tensor.element_size",
    "torch.Tensor.is_contiguous",
    "torch.Tensor.is_floating_point",
    "torch.Tensor.is_complex",
    "torch.Tensor.get_device",
    "torch.Tensor.__len__",
    "torch.Tensor.__repr__",
    "torch.Tensor.__format__",
    "torch.Tensor.__hash__",
    "torch.Tensor.requires_grad_",
    "torch.Tensor.storage_offset",
    "torch.Tensor.untyped_storage",
    "torch.Tensor._is_view",
    "torch.Tensor.__reduce_ex__",
    "torch.Tensor.dim_order",
    "torch.Tensor.has_names",
    "torch.Tensor.is_set_to",
}
_MATMULS = {
    "torch.nn.functional.linear",
    "torch.matmul",
    "torch.Tensor.matmul",
    "torch.Tensor.__matmul__",
    "torch.mm",
    "torch.Tensor.mm",
    "torch.bmm",
    "torch.Tensor.bmm",
}


def op_name(func: Callable) -> str:
    """``torch.softmax``, ``torch.nn.functional.linear``, ``torch.Tensor.add``."""
    name = resolve_name(func)
    if name:
        short = getattr(func, "__name__", None)
        if (
            name.startswith("torch.")
            and name.count(".") == 1
            and short
            and name != f"torch.{short}"
            and getattr(torch, short, None) is func
        ):
            return (
                f"torch.{short}"  # torch's table names a twin for some (torch.mm -> "torch.spmm")
            )
        return name
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None) or ""
    if module == "torch" and qualname.startswith("_VariableFunctionsClass."):
        return "torch." + qualname.split(".", 1)[1]  # torch._foreach_mul_, as the user wrote it
    return f"{module}.{qualname}" if module and not qualname.startswith(module) else qualname


_TENSOR_TO = torch.Tensor.to
_TO_DEVICE = ("torch.Tensor.to", "device")  # its frame's key in ``Frames.ops``


def moves_device(args: tuple, kwargs: dict) -> bool:
    """Whether a ``Tensor.to`` call names a device and no dtype: ``x.to("cuda")``,
    ``x.to("cpu", copy=True)`` (ATen's ``to.device`` overload with the dtype kept)."""
    if "dtype" in kwargs or any(isinstance(a, (torch.dtype, torch.Tensor)) for a in args[1:]):
        return False
    return "device" in kwargs or any(
        isinstance(a, (str, torch.device, int)) and not isinstance(a, bool) for a in args[1:]
    )


def classify(frames: Frames, func: Callable) -> int:
    """Frame id of ``func``'s operator frame, or ``SKIP`` or ``BACKWARD_ENTRY``; cached in ``frames.ops``."""
    name = op_name(func)
    if func in BACKWARD_ENTRY_POINTS:
        fid = BACKWARD_ENTRY
    elif (
        name in _PASS_THROUGH
        or name.endswith((".__get__", ".__set__", ".__delete__"))
        or "_set_grad_enabled" in name
        or "profiler." in name
        or name.startswith("torch._C._profiler")
    ):
        fid = SKIP
    else:
        fid = frames.op(name)
        if name in _MATMULS:
            frames.matmuls.add(fid)
    frames.ops[func] = fid
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
        if (
            isinstance(arg, _Tensor)
            and arg.layout == _strided
            and arg.untyped_storage().data_ptr() == ptr
        ):
            return 0
    return storage.nbytes()


def matmul_flops(left: Any, out: Any) -> int:
    """2·M·N·K of a matmul-like call: a multiply and an add per output element
    and contracted element (``left``'s last dimension). The one formula of both
    Python capture modes; the native capture computes the same from shapes
    (``matmul_flops`` in ``csrc/capture.cc``)."""
    if isinstance(out, _Tensor) and isinstance(left, _Tensor) and left.dim() > 0:
        return 2 * out.numel() * left.shape[-1]
    return 0


def _hook(method: Callable[..., Any], shared_kwargs: dict | None) -> Callable[..., Any]:
    """A mode's ``__torch_function__``/``__torch_dispatch__`` running ``method``
    (no kwargs: ``shared_kwargs``, or a fresh dict where None): the user's
    exception leaves it with the traceback it has without us."""

    def hook(self: Any, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {} if shared_kwargs is None else shared_kwargs
        try:
            return method(self, func, args, kwargs)
        except BaseException as exc:
            cut_own_frames(exc)
            raise

    return hook


class OperatorMode(TorchFunctionMode):
    """Records each torch call as an operator scope while a window is open.

    The checks before the interceptor are written flat on purpose (cached
    attributes, no helper calls on the common path): they run for every torch
    call in a window.
    """

    def __init__(self, hub: Hub) -> None:
        super().__init__()
        self.hub = hub
        self.ops = hub.frames.ops
        self.tag = hub.backward.hooks.tag
        # Made per window: without shapes, all there is to record after a call
        # is its autograd nodes (one call less per op).
        self.scope = Interceptor(
            hub, "operator", capture=True, after=self._recorded if hub.window.shapes else self.tag
        )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        try:  # inline, not through `_hook`: this runs for every torch call, and a call costs ~50 ns
            # Under dynamo tracing is_compiling() folds this to a plain call before
            # any of our state is read, so nothing of ours is traced or guarded on.
            # Metadata reads (half the calls in an optimizer step) leave next.
            if _is_compiling():
                return func(*args, **kwargs)
            fid = self.ops.get(func)
            hub = self.hub
            if fid == SKIP or not hub.active:
                return func(*args, **kwargs)
            if fid is None:
                try:
                    fid = classify(hub.frames, func)
                except Exception as exc:
                    hub.fail(exc, "operator")
                    fid = SKIP  # the user's call still runs, once, outside this handler
                if fid == SKIP:
                    return func(*args, **kwargs)
            if fid == BACKWARD_ENTRY:
                return hub.backward.run(func, args, kwargs)
            if func is _TENSOR_TO and moves_device(args, kwargs):  # a transfer, not a cast
                fid = self.ops.get(_TO_DEVICE)
                if fid is None:
                    try:
                        fid = self.ops[_TO_DEVICE] = hub.frames.op(
                            "torch.Tensor.to", detail="device"
                        )
                    except (
                        Exception
                    ) as exc:  # the profiler's error: the user's call still runs, once
                        hub.fail(exc, "operator")
                    if fid is None:
                        return func(*args, **kwargs)
            suspended = hub.window.suspended
            # inside a compiled region: it records itself
            if suspended and get_ident() in suspended:
                return func(*args, **kwargs)
            first_seq = _next_seq() if _grad_enabled() else None
            return self.scope.call((fid,), func, args, kwargs, first_seq)
        except BaseException as exc:  # the user's, with the traceback it has without us
            cut_own_frames(exc)
            raise

    def _recorded(
        self, node: int, frames: tuple, first_seq: int | None, args: tuple, kwargs: dict, out: Any
    ) -> None:
        """What a window with shapes reads of a call: alloc_bytes and FLOPs, then its autograd nodes."""
        hub = self.hub
        window = hub.window
        # In-place calls (most of an optimizer step) return their first argument.
        # On CUDA, Kineto's memory events give alloc_bytes instead.
        if not hub.device.on and not (args and out is args[0]):
            size = output_bytes(args, out)
            if size:
                hub.collector.add(node, window.metric_alloc, size)
        if frames[0] in hub.frames.matmuls:
            hub.collector.add(
                node, window.metric_flops, matmul_flops(args[0] if args else None, out)
            )
        self.tag(node, frames, first_seq, args, kwargs, out)


class AtenMode(TorchDispatchMode):
    """Comprehensive mode: every ATen op as an operator scope under the
    enclosing scope (a torch call in forward, an autograd node in backward).

    An ATen scope adds no Python frames, so it inherits the enclosing scope's
    user depth (``INHERIT``) instead of walking the stack. FLOPs of the
    matmuls come from their shapes directly: ``flop_registry``'s formulas map
    a pytree over every argument, which cost ~x1.07 of the GPT step."""

    def __init__(self, hub: Hub) -> None:
        super().__init__()
        self.hub = hub
        # forward, backward: ATen op -> frame
        self.ids: tuple[dict[Any, int], dict[Any, int]] = (
            {},
            {},
        )
        self.flops: dict[Any, Any] = {}  # ATen op -> FLOP formula, or None
        self.shapes = hub.window.shapes  # made per window: FLOPs only where the window takes shapes
        self.scope = Interceptor(hub, "aten", user_depth=INHERIT)
        # ops with a formula
        self.counted = Interceptor(hub, "aten", user_depth=INHERIT, after=self._count_flops)

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        hub = self.hub
        if not hub.active:
            return func(*args, **kwargs)
        try:
            backward = _current_node() is not None
            fid = self.ids[backward].get(func)
            if fid is None:
                fid = self.ids[backward][func] = hub.frames.aten(
                    func, FLAG_BACKWARD if backward else 0
                )
            count = self.flops.get(func, _UNKNOWN) if self.shapes else None
            if count is _UNKNOWN:
                count = self.flops[func] = _flop_formula(func)
        except Exception as exc:
            hub.fail(exc, "aten")
            fid = None  # the user's call still runs, once, outside this handler
        if fid is None:
            return func(*args, **kwargs)
        if count is None:
            return self.scope.call((fid,), func, args, kwargs)
        return self.counted.call((fid,), func, args, kwargs, count)

    __torch_dispatch__ = _hook(_dispatch, None)

    def _count_flops(
        self, node: int, frames: tuple, count: Any, args: tuple, kwargs: dict, out: Any
    ) -> None:
        try:
            flops = int(count(*args, **kwargs, out_val=out))
        except Exception:  # FLOPs are best effort; an odd signature is not an error
            return
        hub = self.hub
        hub.collector.add(node, hub.window.metric_flops, flops)


def _flop_formula(func: Any) -> Any:
    """``func``'s FLOP formula (``flop_registry``'s signature), or None."""
    try:
        packet = func.overloadpacket
    except AttributeError:  # not an ATen op overload
        return None
    return _MATMUL_FLOPS.get(packet) or flop_registry.get(packet)


def _contracting(left: int) -> Any:
    """``flop_registry``'s signature for ``matmul_flops`` of an ATen matmul whose left operand is ``args[left]``."""

    def count(*args: Any, out_val: Any, **kwargs: Any) -> int:
        return matmul_flops(args[left], out_val)

    return count


_UNKNOWN = object()
_aten = torch.ops.aten
_MATMUL_FLOPS = {
    _aten.mm: _contracting(0),
    _aten.bmm: _contracting(0),
    _aten.addmm: _contracting(1),
    _aten.baddbmm: _contracting(1),
}
