"""Evaluation loops profiled as their own windows beside a training session.

Trainer callbacks with ``profile_eval=True`` profile each evaluation loop
(Lightning's validation and test, Hugging Face's evaluate) in a session of its
own: run ``<run>/<loop>``, steps counting that loop's batches from 0, one
window as long as the training window. The callbacks only say where a batch
begins and ends; this class keeps the sessions and their step counters.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .session import Session


class EvalWindows:
    """The evaluation sessions of one training session.

    Args:
        make: Builds a session from keyword overrides (the callback's own
            factory, so eval sessions share its logdir, rank and skipped packages).
    """

    def __init__(self, make: Callable[..., Session]) -> None:
        self._make = make
        self.sessions: dict[str, Session] = {}
        self.steps: dict[str, int] = {}
        self.open: str | None = None  # the loop whose batch is running

    def begin(self, train: Session, loop: str) -> None:
        """A batch of ``loop`` begins (ending any batch still open)."""
        self.end()
        session = self.sessions.get(loop)
        if session is None:
            run, count = train.config.run, train.config.steps.count
            steps = {"start": 0, "count": count, "every": None, "repeat": 1}
            # an evaluation loop's batches are the eval phase
            session = self.sessions[loop] = self._make(
                run=f"{run}/{loop}" if run else loop,
                steps=steps,
                time_range=None,
                default_phase="eval",
            )
        self.open = loop
        session.step_begin(self.steps.setdefault(loop, 0))

    def end(self) -> None:
        """The open batch, if any, ends."""
        if self.open is not None:
            loop, self.open = self.open, None
            self.sessions[loop].step_end(self.steps[loop])
            self.steps[loop] += 1

    def close(self) -> list[Path]:
        """Flush every eval window; the files written."""
        self.end()
        written: list[Path] = []
        for session in self.sessions.values():
            session.close()
            written += session.written
        self.sessions = {}
        return written


def batch_count(loader: Any) -> int | None:
    """Batches in ``loader``, or None where it has no length (an iterable dataset)."""
    try:
        return len(loader)
    except Exception:  # no length, or one that fails to compute
        return None
