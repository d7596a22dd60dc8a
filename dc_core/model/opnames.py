"""One name per operator, whichever capture path or framework named it.

PyTorch's native capture names operators as ATen does (``aten::linear``,
``aten::index_put_``), the records autograd makes under a bare op name
included (``detach_`` is ``aten::detach_``, ``dc_torch/csrc/capture.cc``);
a bare name there is never an ATen op (an ``autograd.Function``'s apply,
AOTAutograd's ``CompiledFunction``, Dynamo's guard check). Its Python path
names the torch function the user called (``torch.nn.functional.linear``,
``torch.Tensor.__rmul__``); autograd names backward nodes
(``CumprodBackward0``). Rules, reports and tests that ask
"is this a linear / an item() / a cast" compare `op_name`, so every path
answers the same.
"""

from __future__ import annotations

import re

_BACKWARD_SUFFIX = re.compile(r"(_?backward\d*)$")

#: Python operator dunders → the operator they run (``x * y`` is ``mul``); the
#: scalar conversions get names of their own: they synchronise, ``.float()`` casts.
_DUNDERS = {
    "truediv": "div",
    "rtruediv": "div",
    "itruediv": "div",
    "floordiv": "floor_divide",
    "bool": "bool_scalar",
    "int": "int_scalar",
    "float": "float_scalar",
    "index": "index_scalar",
    "getitem": "index",
    "setitem": "index_put",
    "matmul": "matmul",
    "rmatmul": "matmul",
}
_REFLECTED = {"add", "sub", "mul", "pow", "and", "or", "xor", "mod", "lshift", "rshift"}

#: Python-level names whose ATen operator has another name.
_ALIASES = {"cross_entropy": "cross_entropy_loss", "_local_scalar_dense": "item"}


def op_name(name: str) -> str:
    """An operator's bare name: ``aten::index_put_`` → ``index_put``,
    ``torch.nn.functional.linear`` → ``linear``, ``torch.Tensor.__rmul__`` →
    ``mul``, ``CumprodBackward0`` → ``cumprod``."""
    name = name.rsplit("::", 1)[-1].rsplit(".", 1)[-1].lower()
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        bare = name[2:-2]
        if bare in _DUNDERS:
            return _DUNDERS[bare]
        if bare[:1] in ("r", "i") and bare[1:] in _REFLECTED:
            bare = bare[1:]
        return bare
    name = _BACKWARD_SUFFIX.sub("", name) if name != "backward" else name
    name = name.rstrip("_") or name
    return _ALIASES.get(name, name)


#: Collectives: c10d's ops (``c10d::allreduce_``) and the Python functions
#: that call them (``torch.distributed.all_reduce``), NCCL kernels, XLA's
#: collective HLOs (``all-reduce.3``, ``all-gather-start``) and JAX's
#: ``psum``-family primitives. ``aten::gather``/``aten::scatter_`` are not.
_COLLECTIVE_HLO = re.compile(
    r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)(-start|-done)?(\.\d+)?$"
)
_COLLECTIVE_PRIMITIVES = frozenset(
    {
        "psum",
        "pmean",
        "pmax",
        "pmin",
        "all_gather",
        "all_to_all",
        "ppermute",
        "psum_scatter",
        "reduce_scatter",
    }
)


def is_collective(kind: str, name: str) -> bool:
    """Whether a frame is a collective operator or kernel: time under it is
    time a rank spends communicating or waiting for the other ranks."""
    if kind not in ("operator", "kernel"):
        return False
    return (
        name.startswith(("c10d::", "torch.distributed.", "nccl", "ncclDevKernel", "ncclKernel"))
        or bool(_COLLECTIVE_HLO.match(name))
        or name in _COLLECTIVE_PRIMITIVES
    )
