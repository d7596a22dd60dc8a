"""The context managers a session hands out for phases and hand-marked regions.

Each enters through the session's guarded methods (fail-open) and never
swallows the user's exception; outside a window the session hands out
``NO_PHASE``, which does nothing.
"""

from __future__ import annotations

from typing import Any


class PhaseScope:
    """``with session.phase(name)``: work inside belongs to phase ``name``."""

    __slots__ = ("session", "name", "below_caller", "depth")

    def __init__(self, session: Any, name: str, below_caller: bool = False) -> None:
        self.session, self.name, self.below_caller, self.depth = session, name, below_caller, -1

    def __enter__(self) -> PhaseScope:
        self.depth = self.session._enter_phase(self.name, self.below_caller)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.depth is not None and self.depth >= 0:
            self.session._leave_phase(self.depth, True)
        return False  # never swallow the user's exception


class RegionScope:
    """``with session.region(name)``: a hand-marked operator under the calling line."""

    __slots__ = ("session", "frame", "depth")

    def __init__(self, session: Any, frame: int) -> None:
        self.session, self.frame, self.depth = session, frame, -1

    def __enter__(self) -> RegionScope:
        self.depth = self.session._enter_region(self.frame)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.depth is not None and self.depth >= 0:
            self.session._leave_phase(self.depth)
        return False


class _NoPhase:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


NO_PHASE = _NoPhase()
