"""Internal faults injected at each hook boundary of the PyTorch adapter.

A fault is an exception raised by the profiler's own code at the ``nth`` time
one hook reaches the collector: the collector is wrapped in a proxy that
raises from the method a hook calls (``enter``, ``exit``, ``start_sampler``),
when that hook's function is among its callers. The user's code is never
what raises, so everything the user sees must be as without the profiler.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any


class InjectedFault(RuntimeError):
    """The profiler-internal error a test plants."""


@dataclass(frozen=True)
class Point:
    """Where a fault lands: ``method`` of the collector, called by ``caller``
    (file name, function name) ``depth`` frames above the call (0: directly)."""

    method: str
    caller: tuple[str, str] | None = None
    depth: int = 0


#: Every hook boundary of the Python capture path.
POINTS = {
    "operator": Point(
        "enter", ("ops.py", "__torch_function__"), depth=1
    ),  # through the shared Interceptor
    "operator exit": Point(
        "exit", ("ops.py", "__torch_function__"), depth=1
    ),  # through the shared Interceptor
    "aten": Point("enter", ("ops.py", "_dispatch"), depth=1),
    "backward": Point("enter", ("autograd.py", "_open")),
    "module": Point("enter", ("modules.py", "pre")),
    "phase": Point("enter", ("phases.py", "_begin"), depth=3),  # through the session's phase
    "collective": Point("enter", ("collectives.py", "kernel"), depth=1),
    "sampler": Point("stop_sampler"),  # once per window: when it closes
    "writer": Point("snapshot"),  # once per window: when it is written
}


#: The same hooks on the native capture path, where one exists there (ATen ops
#: and their exits are C++ callbacks: no Python boundary to fault), plus the
#: native capture's own start and stop.
NATIVE_POINTS = {
    "operator": Point(
        "intern", ("state.py", "_path_frame"), depth=1
    ),  # naming a module, inside an op's callback
    "phase": POINTS["phase"],
    "backward": Point(
        "enter", ("phases.py", "_begin"), depth=3
    ),  # autograd.backward's phase wrapper
    # a collective opens as an operator does (region_enter, no collector call):
    # the fault lands in recording what it moved
    "collective": Point("add", ("collectives.py", "_launched")),
    "sampler": POINTS["sampler"],
    "writer": POINTS["writer"],
    "capture start": Point("capture_start"),
    "capture stop": Point("capture_stop"),
}

#: Points per capture path.
PATHS = {"python": POINTS, "native": NATIVE_POINTS}


class FaultyCollector:
    """Delegates to ``real``; raises `InjectedFault` at the ``nth`` matching call."""

    def __init__(self, real: Any, point: Point, nth: int) -> None:
        self._real, self._point, self._left = real, point, nth
        self.raised = 0

    def _maybe_fail(self, method: str) -> None:
        point = self._point
        if method != point.method or self._left <= 0:
            return
        if point.caller is not None and not _called_from(point.caller, point.depth):
            return
        self._left -= 1
        if self._left == 0:
            self.raised += 1
            raise InjectedFault(f"injected fault at {method}")

    def enter(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("enter")
        return self._real.enter(*args, **kwargs)

    def exit(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("exit")
        return self._real.exit(*args, **kwargs)

    def stop_sampler(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self._maybe_fail("stop_sampler")
        finally:
            self._real.stop_sampler(*args, **kwargs)  # the thread stops all the same

    def add(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("add")
        return self._real.add(*args, **kwargs)

    def intern(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("intern")
        return self._real.intern(*args, **kwargs)

    def capture_start(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("capture_start")
        return self._real.capture_start(*args, **kwargs)

    def capture_stop(self, *args: Any, **kwargs: Any) -> Any:
        try:
            self._maybe_fail("capture_stop")
        finally:
            result = self._real.capture_stop(*args, **kwargs)  # capture stops all the same
        return result

    def snapshot(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("snapshot")
        return self._real.snapshot(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _called_from(caller: tuple[str, str], depth: int) -> bool:
    # _called_from <- _maybe_fail <- the proxy method <- its caller
    frame = sys._getframe(3 + depth)
    code = frame.f_code
    return code.co_name == caller[1] and os.path.basename(code.co_filename) == caller[0]


def inject(
    monkeypatch: Any, point: str, nth: int = 1, capture: str = "python"
) -> list[FaultyCollector]:
    """Make every collector created from now on a `FaultyCollector` faulting at
    ``point`` of capture path ``capture`` (forced through the config); returns them."""
    import json

    monkeypatch.setenv("DEEPCONTEXT_CONFIG", json.dumps({"capture": capture}))
    from dc_core.collect import collector as collector_mod

    made: list[FaultyCollector] = []
    create = collector_mod.create_collector

    def create_faulty(*args: Any, **kwargs: Any) -> FaultyCollector:
        made.append(FaultyCollector(create(*args, **kwargs), PATHS[capture][point], nth))
        return made[-1]

    monkeypatch.setattr(collector_mod, "create_collector", create_faulty)
    return made
