"""Weight gradients XLA kept no metadata for, placed by the weight they are the gradient of.

XLA rewrites some weight-gradient convolutions into instructions of its own
without metadata (a first layer's, whose input has one feature, as in an
MNIST CNN). Placed by their operands, as other instructions without metadata
are, they would go where their gradient input was made: under the BatchNorm
that follows the Conv, as that BatchNorm's backward. But a weight gradient's
output has its weight's shape (up to layout), and what uses it (the
optimizer's update) reads that weight within a few steps; the forward product
reading that weight is the one it is the gradient of. So it is placed as that
product's backward: its name stack, under ``transpose``, and its Python stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dc_jax.names import split_name_stack

#: Single-operand instructions a weight passes through on its way to a product
#: (a layout change, a cast), and steps followed from a gradient to its users.
_PASS_THROUGH = {"copy", "transpose", "bitcast", "reshape", "convert", "bitcast-convert", "fusion"}
_THROUGH_STEPS = 4
_USER_STEPS = 6
_FUNCTION = re.compile(r"^(jit|pjit|pmap|xla_pmap)\(.*\)$")


@dataclass
class Graph:
    """What placing weight gradients reads of a parsed HLO module.

    Attributes:
        opcodes: Instruction → opcode.
        op_names: Instruction → its own name stack ("" without metadata).
        operands: Instruction → its operands, in order.
        users: Instruction → the instructions using it.
        shapes: Array results' dimensions.
        products: Instruction → the matrix-product primitive it runs (itself
            or in its fused computation), for those that run one.
        bare: Instructions without metadata of their own.
        nested: Instructions inside fused computations (never executed alone).
    """

    opcodes: dict[str, str]
    op_names: dict[str, str]
    operands: dict[str, list[str]]
    users: dict[str, list[str]]
    shapes: dict[str, tuple[int, ...]]
    products: dict[str, str]
    bare: set[str]
    nested: set[str]


def weight_gradients(graph: Graph, primitive: str = "conv_general_dilated") -> dict[str, str]:
    """Each metadata-less ``primitive`` instruction whose output is a weight's
    gradient → the forward instruction reading that weight.

    A forward product qualifies when one of its operands is shaped like the
    gradient's output (the same dimensions in any order); of several, the
    one whose weight the gradient's users read at the fewest steps from it
    wins; with no user reading one, only a sole candidate is taken."""
    out: dict[str, str] = {}
    targets = [
        n
        for n in graph.bare
        if graph.products.get(n) == primitive
        and n not in graph.nested
        and len(graph.shapes.get(n, ())) >= 3
    ]
    if not targets:
        return out
    forward = [
        n
        for n, p in graph.products.items()
        if p == primitive
        and n not in graph.bare
        and n not in graph.nested
        and "/" in graph.op_names.get(n, "")
        and "transpose(" not in graph.op_names[n]
    ]
    for target in targets:
        shape = sorted(graph.shapes[target])
        readers: dict[
            str, list[str]
        ] = {}  # a weight (where it comes from) → forward products reading it
        for product in forward:
            for operand in graph.operands.get(product, ()):
                if sorted(graph.shapes.get(operand, ())) == shape:
                    readers.setdefault(_origin(graph, operand), []).append(product)
        weight = _read_by_users(graph, target, readers)
        if weight is None and len(readers) == 1:
            weight = next(iter(readers))
        if weight is not None:
            out[target] = readers[weight][0]
    return out


def backward_name(op_name: str) -> str:
    """The name stack JAX gives the transpose of the op named ``op_name``:
    ``jit(f)/jvp(CNN)/Conv_0/conv_general_dilated`` →
    ``jit(f)/transpose(jvp(CNN))/Conv_0/conv_general_dilated``."""
    parts = split_name_stack(op_name)
    first = 1 if parts and _FUNCTION.match(parts[0]) else 0  # the jitted function is no scope
    if first < len(parts) - 1:
        parts[first] = f"transpose({parts[first]})"
    else:
        parts.insert(first, "transpose()")
    return "/".join(parts)


def _origin(graph: Graph, name: str) -> str:
    """Where ``name``'s value comes from, through layout changes and casts."""
    for _ in range(_THROUGH_STEPS):
        operands = graph.operands.get(name, ())
        if len(operands) != 1 or graph.opcodes.get(name) not in _PASS_THROUGH:
            break
        name = operands[0]
    return name


def _read_by_users(graph: Graph, target: str, readers: dict[str, list[str]]) -> str | None:
    """The one weight of ``readers`` that the users of ``target`` (and theirs,
    breadth first) read soonest; None if none does, or two do at one step."""
    seen, frontier = {target}, [target]
    for _ in range(_USER_STEPS):
        hits: set[str] = set()
        following = []
        for name in frontier:
            for user in graph.users.get(name, ()):
                if user in seen:
                    continue
                seen.add(user)
                following.append(user)
                hits.update(
                    w for o in graph.operands.get(user, ()) if (w := _origin(graph, o)) in readers
                )
        if hits:
            return hits.pop() if len(hits) == 1 else None
        frontier = following
    return None
