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
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(op_name):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "/" and depth == 0:
            parts.append(op_name[start:i])
            start = i + 1
    parts.append(op_name[start:])
    return [p for p in parts if p]


def split_combined(component: str) -> list[str] | None:
    """The members of a name XLA made by combining instructions, ``(a/b:c/d)`` →
    ``["a/b", "c/d"]`` (colons inside parentheses kept); None for any other name.

    XLA's combiners (the all-reduce combiner, for one) give the instruction
    they make the ``:``-joined names of the instructions they merged, relative
    to the scope those share, in parentheses."""
    if len(component) < 2 or component[0] != "(" or component[-1] != ")":
        return None
    inner = component[1:-1]
    members, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return None  # ``(a)/(b)``: two groups, not one combined name
        elif ch == ":" and depth == 0:
            members.append(inner[start:i])
            start = i + 1
    members.append(inner[start:])
    return [m for m in members if m]


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
