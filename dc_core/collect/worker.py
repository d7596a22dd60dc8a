"""A periodic daemon thread: the reference collector's sampler and monitor.

The thread ticks at a fixed rate (no drift), skips ticks it fell behind on
instead of bursting to catch up (counting them in ``missed``), stops at
interpreter exit, and disables itself after logging the first error its tick
raises: the profiler must never break training.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("deepcontext")


class WorkerThread(threading.Thread):
    """Marks the collector's own threads so the sampler can leave them out."""


class Worker:
    """Calls ``tick()`` every ``period_s`` seconds on a daemon thread."""

    def __init__(self, name: str, period_s: float, tick: Callable[[], None]) -> None:
        self.missed = 0
        self._period = period_s
        self._tick = tick
        self._stop = threading.Event()
        self._thread = WorkerThread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        atexit.register(self.stop)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (safe to call twice, or from the thread itself)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        atexit.unregister(self.stop)

    @property
    def running(self) -> bool:
        # False in a forked child: threads do not survive fork.
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        due = time.monotonic() + self._period
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self._tick()
            except Exception:
                logger.exception("%s failed; it stops, training goes on", self._thread.name)
                return
            due += self._period
            behind = int((time.monotonic() - due) // self._period)
            if behind > 0:
                self.missed += behind
                due += behind * self._period
