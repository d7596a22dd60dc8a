"""The reference collector's per-step bounds (``Collector.mark_step`` in
``_native.pyi``; ``Tree::mark_step`` in native/tree.cc is the C++ side): per
node, the least and greatest exclusive value of one step over the marked steps."""

from __future__ import annotations

from array import array


class StepBounds:
    """Bounds of one metric column; two columns however many steps."""

    def __init__(self) -> None:
        self.marked = 0
        self._last, self.low, self.high = array("q"), array("q"), array("q")

    def mark(self, column: array) -> None:
        """A step ended: each node's value since the last mark is that step's
        (a node new since then had 0 in every earlier step)."""
        last, low, high, seen = self._last, self.low, self.high, len(self._last)
        for bounds in (last, low, high):
            bounds.extend([0] * (len(column) - seen))
        for i, now in enumerate(column):
            value = now - last[i]
            last[i] = now
            if not self.marked:
                low[i] = high[i] = value
            elif i >= seen:
                low[i], high[i] = min(value, 0), max(value, 0)
            else:
                low[i], high[i] = min(low[i], value), max(high[i], value)
        self.marked += 1

    def snapshot(self, nodes: int) -> dict[str, array]:
        """The bounds of ``nodes`` nodes, as a snapshot's ``step_bounds``
        (nodes made since the last mark: 0, they ran in no marked step)."""
        pad = [0] * (nodes - len(self.low))
        return {
            "cpu_time_ns.min": array("q", [*self.low, *pad]),
            "cpu_time_ns.max": array("q", [*self.high, *pad]),
        }

    def clear(self) -> None:
        self.marked = 0
        for bounds in (self._last, self.low, self.high):
            del bounds[:]
