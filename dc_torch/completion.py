"""When collectives complete, clocked on their backend's thread.

A collective's work completes on its backend's thread (gloo's worker). A
Python callback on its future would take the GIL there: the step pays the
hand-over, and the clock it reads is when the GIL came, up to a switch
interval late. The native extension's ``time_completion`` operator
(``dc_torch/csrc/completion.h``) instead arms a C++ callback that only reads
the clock, into a slot Python reads by the launch's number when it needs the
time (`dc_torch.collectives`: when the work is waited for, forgotten, or the
window closes).
"""

from __future__ import annotations

from typing import Any

import torch

_enable_record_function = torch._C._autograd._enable_record_function


class CompletionClock:
    """When collectives complete, read on the backend's thread without the
    GIL by the native extension (``completion.h``'s ``time_completion``), into
    slots Python reads later by each launch's number."""

    def __init__(self, extension: Any) -> None:
        self._completed_at = extension.completed_at
        self._recording = extension.record_function_enabled
        # the overload's C++ entry: the packet's Python call resolves it each time
        self._arm = getattr(torch.ops, extension.completion_op()).time_completion.default._op
        self._next = 0

    def arm(self, work: Any) -> int:
        """Clock ``work``'s completion; its launch number (-1: it has no future,
        so its wait's end is its completion).
        Its operator runs unobserved: our capture would record it as the
        collective's child, and so would a torch.profiler running beside us
        (whose counts then change: it merges a record into a lone child of
        the same name, which ours would no longer be)."""
        get_future = getattr(work, "get_future", None)
        if get_future is None:
            return -1
        try:
            future = get_future()
        except RuntimeError:  # a work type without one (gloo's reduce-scatter): timed at its wait
            return -1
        number, self._next = self._next, self._next + 1
        if not self._recording():
            self._arm(future, number)
            return number
        _enable_record_function(False)
        try:
            self._arm(future, number)
        finally:
            _enable_record_function(True)
        return number

    def completed_at(self, number: int) -> int:
        """``time.monotonic_ns()`` when launch ``number`` completed; 0: not yet."""
        return self._completed_at(number)
