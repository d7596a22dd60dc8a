"""The plain-loop API every framework shares::

    with dc_torch.profile(logdir="runs/x", steps=StepRange(start=5, count=3)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

`StepLoop` numbers the steps and drives the session; a framework's
``Profiler`` subclasses it with its adapter and, where the framework needs
them, hooks for the profiler's start and stop.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from .adapter import Adapter
from .config import ProfilerConfig
from .session import Session

_Loop = TypeVar("_Loop", bound="StepLoop")


class StepLoop:
    """Profiles a plain training loop in step windows.

    Call ``start()`` before the first step, ``step()`` once at the end of every
    training step (the first step is step 0) and ``stop()`` after the loop; or
    use it as a context manager. Outside a window ``step()`` costs a compare.

    Args:
        adapter: The framework's hooks, installed while a window is open (None: none).
        config: What to profile; keyword ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both) and may name the session's
            ``rank``, ``world_size`` or ``host``.
        framework: Name recorded in profiles ("torch", "jax").
        default_phase: Phase a step's work belongs to unless marked otherwise.

    Raises:
        ValueError: a bad config field, named, here rather than at the first step.

    Attributes:
        session: The session this loop drives (made here, so it always exists).
        adapter: The framework adapter.
        current_step: The number of the step running now.
    """

    def __init__(
        self,
        adapter: Adapter | None,
        config: ProfilerConfig | None = None,
        *,
        framework: str,
        default_phase: str,
        **overrides: Any,
    ) -> None:
        self.adapter = adapter
        self.session = Session(
            config, framework=framework, adapter=adapter, default_phase=default_phase, **overrides
        )
        self.current_step = 0
        self._started = False

    def start(self: _Loop) -> _Loop:
        """Begin the current step (step 0 unless ``step()`` ran before) and a
        window, if one starts there; later calls do nothing."""
        if not self._started:
            self._started = True
            self._on_start()
            self.session.step_begin(self.current_step)
        return self

    def step(self) -> None:
        """Mark the end of the current training step and the start of the next."""
        done = self.current_step
        self.current_step = done + 1
        session = self.session
        session.step_end(done)
        session.step_begin(done + 1)

    def phase(self, name: str) -> AbstractContextManager[Any]:
        """Mark the work inside ``with prof.phase(name):`` as phase ``name``
        (e.g. "dataloader", "optimizer"); outside a window it does nothing."""
        return self.session.phase(name)

    def stop(self) -> None:
        """Close the session (an open window is written with the steps it saw)
        and release what ``start()`` took; idempotent."""
        try:
            self.session.close()
        finally:
            self._on_stop()

    @property
    def written(self) -> list[Path]:
        """Profile files written so far."""
        return list(self.session.written)

    def __enter__(self: _Loop) -> _Loop:
        try:
            return self.start()
        except BaseException:  # e.g. Ctrl-C while starting: no ``__exit__`` will come to unhook
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False  # the user's exception propagates unchanged

    # --- for subclasses ----------------------------------------------------------
    def _on_start(self) -> None:
        """The profiler starts, before step 0 begins: hooks that span its life go in."""

    def _on_stop(self) -> None:
        """The profiler stopped (also when closing failed): those hooks come out."""
