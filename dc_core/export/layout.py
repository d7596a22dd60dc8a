"""The flame-chart layout that the Chrome and speedscope exporters share.

An aggregated tree has no timeline, so each node becomes an interval as long
as its inclusive value, its children laid out left to right from its start
(the way flame charts of aggregated profiles are drawn). Positions are whole
metric units (integer nanoseconds for times), so a child's interval lies
inside its parent's exactly; an exporter converts them to its unit with one
monotone function per position, which keeps that true after rounding.

A child never gets more room than its parent has left (a negative exclusive
value could otherwise push it out), and nodes of zero width are left out: a
flame chart cannot show them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..model.tree import Tree


@dataclass(frozen=True)
class Edge:
    """One end of a node's interval: ``opens`` at its start, else closes at its end."""

    opens: bool
    node: int
    at: int


def flame_edges(tree: Tree, metric: str) -> Iterator[Edge]:
    """The opening and closing edges of every drawn node, in nesting order.

    Every node opens after its parent and closes before it, a node's
    children open in tree order, and ``at`` never decreases along the
    sequence, so it reads as a properly nested list of begin/end events.
    The top-level nodes (the root's children) start at 0, one after another.

    Args:
        tree: The tree to lay out.
        metric: The metric whose inclusive values are the widths.
    """
    incl = tree.inclusive(metric)
    # (node, start, width) to open, or (~node, end, 0) to close
    stack: list[tuple[int, int, int]] = []
    _push_children(stack, tree, incl, 0, 0, None)
    while stack:
        node, at, span = stack.pop()
        if node < 0:
            yield Edge(False, ~node, at)
            continue
        yield Edge(True, node, at)
        stack.append((~node, at + span, 0))
        _push_children(stack, tree, incl, node, at, span)


def extent(tree: Tree, metric: str) -> int:
    """Where the last top-level node ends: the width of the whole chart."""
    incl = tree.inclusive(metric)
    return sum(max(incl[k], 0) for k in tree.children(0))


def _push_children(
    stack: list[tuple[int, int, int]],
    tree: Tree,
    incl: list[int],
    node: int,
    start: int,
    room: int | None,
) -> None:
    """Queue ``node``'s drawn children (first child on top), each at the end of
    the one before and no wider than what is left of ``room`` (None: unbounded)."""
    placed = []
    offset = start
    for kid in tree.children(node):
        span = max(incl[kid], 0)
        if room is not None:
            span = min(span, start + room - offset)
        if span > 0:
            placed.append((kid, offset, span))
            offset += span
    stack.extend(reversed(placed))
