"""One name per operator role, whichever capture path named it.

PyTorch's native capture names operators as ATen does (``aten::linear``); its
Python path names the torch function the user called
(``torch.nn.functional.linear``, ``torch.Tensor.add_``). Rules, reports and
tests that ask "is this a linear / an item() / a foreach update" compare
``role(name)``, so both paths answer the same.
"""

from __future__ import annotations

_PREFIXES = ("aten::", "torch.nn.functional.", "torch.Tensor.", "torch._C._nn.", "torch.", "F.")

# Python-level spellings whose ATen op has another name.
_ALIASES = {
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "cross_entropy": "cross_entropy_loss",
    "__bool__": "is_nonzero",
    "__getitem__": "index",
    "__setitem__": "index_put_",
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "add_",
    "__sub__": "sub",
    "__rsub__": "rsub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "mul_",
    "__truediv__": "div",
    "__rtruediv__": "div",
    "__pow__": "pow",
    "__neg__": "neg",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "_local_scalar_dense": "item",
}


def role(name: str) -> str:
    """``role("aten::linear") == role("torch.nn.functional.linear") == "linear"``."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return _ALIASES.get(name, name)


def is_role(name: str, *roles: str) -> bool:
    """Whether operator ``name`` plays one of ``roles`` (``is_role(n, "mm", "bmm")``)."""
    return role(name) in roles
