"""The one explicit registry of sessions: those with hooks in (a window open,
or unhooking pending), those not closed yet, and who watches windows open.

Sessions enter it themselves (`opened`, `track`); everything else reads it.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

logger = logging.getLogger("deepcontext")

_ACTIVE: list[Any] = []
_OPEN: "weakref.WeakSet[Any]" = weakref.WeakSet()
_WATCHERS: list[Callable[[bool], None]] = []


def active_sessions() -> list[Any]:
    """Sessions whose hooks may be in (a window is open, or unhooking is still
    pending), oldest first."""
    return list(_ACTIVE)


def open_sessions() -> list[Any]:
    """Sessions made and not closed yet (enabled ones), in no order."""
    return [s for s in list(_OPEN) if not s.closed and not s.disabled]


def watch_windows(callback: Callable[[bool], None]) -> None:
    """Call ``callback(True)`` when a first session opens a window and
    ``callback(False)`` when none has one any more (``deepcontext run`` writes
    open windows at SIGTERM only meanwhile). A callback that raises is dropped."""
    _WATCHERS.append(callback)


def opened(session: Any) -> None:
    """A session was made: it is open until it closes (held weakly)."""
    _OPEN.add(session)


def track(session: Any, live: bool) -> None:
    """Keep ``session`` among the active ones exactly while ``live`` (hooks of
    its may be in); tell the watchers when the first opens or the last closes."""
    before = bool(_ACTIVE)
    if live and session not in _ACTIVE:
        _ACTIVE.append(session)
    elif not live and session in _ACTIVE:
        _ACTIVE.remove(session)
    if bool(_ACTIVE) != before:
        for watcher in list(_WATCHERS):
            try:
                watcher(bool(_ACTIVE))
            except Exception:  # a watcher never breaks a window
                logger.debug("DeepContext: a window watcher failed", exc_info=True)
                _WATCHERS.remove(watcher)
