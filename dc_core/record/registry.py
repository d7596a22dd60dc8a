"""The one explicit registry of sessions: those with hooks in (a window open,
or unhooking pending), those not closed yet, and who watches windows open.

Sessions enter it themselves (`opened`, `track`); everything else reads it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("deepcontext")


class Registry:
    """The process's sessions, as the session state machine reports them."""

    def __init__(self) -> None:
        self.active: list[Any] = []  # hooks of theirs may be in, oldest first
        self.open: weakref.WeakSet[Any] = weakref.WeakSet()  # made, not closed (held weakly)
        self.watchers: list[Callable[[bool], None]] = []

    def track(self, session: Any, live: bool) -> None:
        """Keep ``session`` among the active ones exactly while ``live``; tell
        the watchers when the first opens or the last closes."""
        before = bool(self.active)
        if live and session not in self.active:
            self.active.append(session)
        elif not live and session in self.active:
            self.active.remove(session)
        if bool(self.active) != before:
            for watcher in list(self.watchers):
                try:
                    watcher(bool(self.active))
                except Exception:  # a watcher never breaks a window
                    logger.debug("DeepContext: a window watcher failed", exc_info=True)
                    self.watchers.remove(watcher)


#: The only module-level mutable state of the profiler's sessions.
REGISTRY = Registry()


def active_sessions() -> list[Any]:
    """Sessions whose hooks may be in (a window is open, or unhooking is still
    pending), oldest first."""
    return list(REGISTRY.active)


def open_sessions() -> list[Any]:
    """Sessions made and not closed yet (enabled ones), in no order."""
    return [s for s in list(REGISTRY.open) if not s.closed and not s.disabled]


def watch_windows(callback: Callable[[bool], None]) -> None:
    """Call ``callback(True)`` when a first session opens a window and
    ``callback(False)`` when none has one any more (``deepcontext run`` writes
    open windows at SIGTERM only meanwhile). A callback that raises is dropped."""
    REGISTRY.watchers.append(callback)


def opened(session: Any) -> None:
    """A session was made: it is open until it closes (held weakly)."""
    REGISTRY.open.add(session)


def track(session: Any, live: bool) -> None:
    """Keep ``session`` among the active ones exactly while ``live`` (hooks of
    its may be in); tell the watchers when the first opens or the last closes."""
    REGISTRY.track(session, live)
