"""What a framework adapter gives a session (``dc_core.record.session.Session``):
the hooks a window installs and removes, and what it adds to the profile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol

if TYPE_CHECKING:
    from .session import Session


class Adapter(Protocol):
    """What a framework adapter provides; every method is optional."""

    framework: str

    def install(self, session: Session) -> None: ...  # window opens: hook (undone by itself if it fails)
    # window closes: unhook, ingest device activity; False while a hook could not be removed yet
    def uninstall(self, session: Session) -> bool | None: ...
    def restore(self) -> bool: ...  # unhook what uninstall could not; True when nothing is left
    def prepare(self, session: Session) -> None: ...  # at session creation: one-off costs out of the steps
    def environment(self) -> dict[str, str]: ...
    def step_overhead_ns(self) -> int: ...  # framework one-offs (compiles) in the step just ended: not step time
    # cpu_time_ns its uninstall moved between nodes after the steps were marked: per node,
    # the least and greatest of that change over the window's steps
    def step_bound_shifts(self) -> Mapping[int, tuple[int, int]]: ...


class WindowSkipped(Exception):
    """Raised by an adapter's ``install`` when a window cannot be recorded for a
    reason outside the profiler (the user's own ``jax.profiler`` trace is
    running): the window is skipped with one warning, nothing is written for
    it, and later windows are tried as scheduled."""
