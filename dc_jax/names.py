"""JAX's names for things: name stacks split into scopes, functions behind wrappers.

Pure helpers, without jax: the HLO reader, the context mapping, the compile
listener and ``deepcontext run``'s step search all name things the same way.
"""

from __future__ import annotations

import functools
from typing import Any

#: Attributes a wrapper keeps the function it wraps in: ``functools.wraps`` and
#: ``jax.jit`` (``__wrapped__``), ``functools.partial`` (``func``), Flax NNX's
#: ``nnx.jit`` (``fun``).
_WRAPPED = ("__wrapped__", "func", "fun")


def split_name_stack(op_name: str) -> list[str]:
    """``a/b(c/d)/e`` → ``["a", "b(c/d)", "e"]`` (slashes inside parentheses kept)."""
    return _split_outside_parentheses(op_name, "/", strict=False) or []


def split_combined(component: str) -> list[str] | None:
    """The members of a name XLA made by combining instructions, ``(a/b:c/d)`` →
    ``["a/b", "c/d"]`` (colons inside parentheses kept); None for any other name.

    XLA's combiners (the all-reduce combiner, for one) give the instruction
    they make the ``:``-joined names of the instructions they merged, relative
    to the scope those share, in parentheses."""
    if len(component) < 2 or component[0] != "(" or component[-1] != ")":
        return None
    return _split_outside_parentheses(component[1:-1], ":")  # ``(a)/(b)``: two groups, None


def _split_outside_parentheses(text: str, separator: str, strict: bool = True) -> list[str] | None:
    """``text``'s non-empty parts between ``separator``s outside parentheses;
    ``strict``: None where a ``)`` closes more than was opened."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0 and strict:
                return None
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def qualified_name(fn: Any) -> str | None:
    """The qualified name of the function behind ``fn`` (see `unwrapped`),
    ``nnx.jit(partial(train_step, ...))`` → ``train_step``; None when there is
    no named function behind it."""
    inner = unwrapped(fn)
    return None if inner is None else inner.__qualname__


def unwrapped(fn: Any, depth: int = 8) -> Any:
    """The first object with a qualified name behind ``fn``'s wrappers:
    ``functools.partial``, ``functools.wraps``, ``jax.jit`` and ``nnx.jit``;
    None if there is none."""
    for _ in range(depth):
        if fn is None:
            return None
        if not isinstance(fn, functools.partial):
            name = getattr(fn, "__qualname__", None)
            if isinstance(name, str) and name and not name.startswith("<unnamed"):
                return fn
        fn = next((inner for attr in _WRAPPED if (inner := _attribute(fn, attr)) is not None), None)
    return None


def _attribute(obj: Any, name: str) -> Any:
    try:
        value = getattr(obj, name, None)
    except Exception:  # a proxy whose attribute lookup fails
        return None
    return value if callable(value) else None
