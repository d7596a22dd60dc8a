"""The reference collector's scopes: one thread's open scopes, and where the
time between two calls recorded inside a scope goes (the rule is
``_native.pyi``'s ``Collector.exit``; native/scopes.h and native/between.cc
are the C++ side).

The tree functions take the collector's ``parent`` and ``depth`` columns
(one entry per node, the root's depth 0).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: Spans a thread may have lent and not yet given up (``Collector.lend``).
MAX_LENT = 64


@dataclass
class Scope:
    node: int
    start_ns: int
    user_depth: int
    context: int  # the node its own frames hang from: where it was opened
    inside: bool  # that node is in the enclosing scope's subtree
    nested_ns: int = 0  # time billed below it: nested scopes and the time between them
    # The last scope closed directly inside this one: when it ended, where it was opened.
    last_ns: int = 0
    last_context: int = -1
    last_inside: bool = False


class Stack(list):
    """One thread's open scopes (a list subclass so the registry can hold it weakly).

    Made on its own thread, it also keeps that thread's CPU clock for the
    sampler (``None`` where the platform has no per-thread clock), and the
    sampler's reading of it at its previous tick.
    """

    def __init__(self) -> None:
        super().__init__()
        # Spans of this thread's time another thread recorded the work of
        # (``Collector.lend``), taken out of its time between scopes.
        self.lent: list[tuple[int, int]] = []
        self.bind()

    def bind(self) -> None:
        """Read the calling (owning) thread's CPU clock; again in a forked child,
        where the thread lives on under a new kernel id."""
        getcpuclockid = getattr(time, "pthread_getcpuclockid", None)
        self.pid = os.getpid()
        self.cpu_clock: int | None = getcpuclockid(threading.get_ident()) if getcpuclockid else None
        self.cpu_ns: int | None = None  # None: no reading yet in this sampler run
        self.credit_ns = 0

    def cpu_periods(self, period_ns: int) -> int:
        """Whole sampler periods of CPU time this thread ran since the last
        reading, to bill at its innermost scope (0 with none open)."""
        if self.cpu_clock is None:  # no per-thread clock: every tick counts as busy
            return 1 if self else 0
        try:
            cpu = time.clock_gettime_ns(self.cpu_clock)
        except OSError:  # the thread ended
            return 0
        last, self.cpu_ns = self.cpu_ns, cpu
        if last is None:  # first reading in this sampler run
            self.credit_ns = 0
            return 0
        if cpu <= last:  # idle: its remainder waits for a tick it runs in
            return 0
        if not self:  # nothing open: CPU time outside every scope is billed to nobody
            self.credit_ns = 0
            return 0
        self.credit_ns += cpu - last
        n, self.credit_ns = divmod(self.credit_ns, period_ns)
        return n


def take_lent(stack: Stack, start: int, end: int) -> int:
    """The part of [start, end] ``stack``'s thread lent away; spans that end by ``end`` are used up."""
    taken = sum(max(0, min(b, end) - max(a, start)) for a, b in stack.lent)
    stack.lent[:] = [(a, b) for a, b in stack.lent if b > end]
    return taken


def stretch_node(
    parent: Sequence[int], depth: Sequence[int], scope: Scope, context: int, inside: bool
) -> int:
    """Where the time between ``scope``'s last call and the next one (opened
    at ``context``) goes: the deepest node both hang from, below ``scope``;
    where they share none, the outermost frame of the call before, else of
    the call after; -1 where neither is below ``scope``."""
    floor = depth[scope.node]
    after = (
        scope.last_inside and scope.last_context != scope.node and depth[scope.last_context] > floor
    )
    before = inside and context >= 0 and depth[context] > floor
    if after and before:
        at = common(parent, depth, scope.last_context, context)
        if depth[at] > floor:
            return at
    if after:
        return ancestor(parent, depth, scope.last_context, floor + 1)
    if before:
        return ancestor(parent, depth, context, floor + 1)
    return -1


def ancestor(parent: Sequence[int], depth: Sequence[int], node: int, d: int) -> int:
    """``node``'s ancestor at depth ``d`` (-1 when ``node`` is shallower)."""
    if depth[node] < d:
        return -1
    while depth[node] > d:
        node = parent[node]
    return node


def common(parent: Sequence[int], depth: Sequence[int], a: int, b: int) -> int:
    """The deepest node both ``a`` and ``b`` descend from."""
    while depth[a] > depth[b]:
        a = parent[a]
    while depth[b] > depth[a]:
        b = parent[b]
    while a != b:
        a, b = parent[a], parent[b]
    return a
