"""What every trainer callback does, written once.

A trainer callback (``dc_lightning``, ``dc_hf``) translates its framework's
hooks into calls of `TrainerSession`: the trainer starts (``begin``), an
optimizer step begins and ends, an evaluation batch begins and ends, the
trainer ends (``close``). This class places the run beside the trainer's
scalars unless the user named a logdir, makes the sessions (skipping the
trainer's own frames), keeps the evaluation windows and collects the files.
It imports no framework: the callback hands it an adapter factory.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..collect.ownfiles import skip_framework_files
from ..launch.process import RUN_ENV
from ..store.logdir import shown_path
from .adapter import Adapter
from .config import ProfilerConfig
from .eval_windows import EvalWindows
from .session import Session


class TrainerSession:
    """The profiling of one trainer: its training session, evaluation windows and files.

    Args:
        config: What to profile; ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both).
        overrides: The callback's keyword overrides.
        adapter: Makes a fresh framework adapter, one per session.
        framework: Name recorded in profiles ("torch").
        default_phase: Phase a step's work belongs to unless marked otherwise.
        machinery: Frameworks whose frames are the trainer's own, left out of
            call paths (keys of ``dc_core.collect.ownfiles.FRAMEWORK_PACKAGES``).

    Attributes:
        session: The training session while the trainer runs, else None.
        evals: The evaluation windows (``profile_eval=True``).
        written: The profile files of every session closed so far.
    """

    def __init__(
        self,
        config: ProfilerConfig | None,
        overrides: Mapping[str, Any],
        *,
        adapter: Callable[[], Adapter],
        framework: str = "torch",
        default_phase: str = "forward",
        machinery: tuple[str, ...] = (),
    ) -> None:
        self.config, self.overrides = config, dict(overrides)
        self.session: Session | None = None
        self.evals = EvalWindows(self._session)
        self.written: list[Path] = []
        self._adapter, self._framework, self._phase = adapter, framework, default_phase
        self._machinery = machinery
        self._place: dict[str, Any] = {}
        self._step: int | None = None  # the optimizer step begun and not yet ended
        self._announced = False  # the first profile's place was said

    @property
    def user_logdir(self) -> bool:
        """Whether the user named the logdir (in the config or a keyword);
        else profiles go where the trainer keeps its scalars."""
        return (
            "logdir" in self.overrides
            or (self.config or ProfilerConfig()).logdir != ProfilerConfig.logdir
        )

    @property
    def eval_wanted(self) -> bool:
        """Whether evaluation batches are profiled now (a session runs with ``profile_eval``)."""
        return self.session is not None and self.session.config.profile_eval

    def begin(self, *, rank: int, world_size: int, place: Callable[[], Mapping[str, Any]]) -> None:
        """The trainer starts: make the training session, unless one runs.

        Args:
            rank: This process's rank in the trainer's job.
            world_size: The job's process count.
            place: Where the trainer keeps its scalars, ``{"logdir": ...}`` and
                optionally ``"run"``; asked only where the user named no
                logdir. A run the user named wins over the trainer's.

        Raises:
            ValueError: a bad config field, named.
        """
        if self.session is not None:
            return
        self._place = {}
        if not self.user_logdir:
            self._place = dict(place())
            if "run" in self._place:
                self._place["run"] = self.overrides.get(
                    "run", (self.config or ProfilerConfig()).run or self._place["run"]
                )
        self._place.update(rank=rank, world_size=world_size)
        self.session = self._session()

    def _session(self, **extra: Any) -> Session:
        """A session at the trainer's place; ``extra`` overrides (an evaluation loop's run and steps)."""
        phase = extra.pop("default_phase", self._phase)
        session = Session(
            self.config,
            framework=self._framework,
            adapter=self._adapter(),
            default_phase=phase,
            **{**self.overrides, **self._place, **extra},
        )
        if not session.disabled:
            skip_framework_files(session.collector, *self._machinery)
        session.on_written = self._announce
        return session

    def _announce(self, path: Path) -> None:
        """Say once, on rank 0, where the first profile went and how to read it
        (``deepcontext run`` says so itself when the command ends)."""
        if (
            self._announced
            or self.session is None
            or self.session.rank != 0
            or os.environ.get(RUN_ENV)
        ):
            return
        self._announced = True
        config = self.session.config
        run_dir = Path(config.logdir) / config.run if config.run else Path(config.logdir)
        report, view = (shlex.quote(shown_path(p)) for p in (run_dir, Path(config.logdir)))
        print(
            f"DeepContext wrote {shown_path(path)}: read it with `deepcontext report {report}`, "
            f"or open the tab with `deepcontext view {view}`",
            file=sys.stderr,
            flush=True,
        )

    # --- training steps ------------------------------------------------------------
    def step_begin(self, step: int) -> None:
        """Optimizer step ``step`` begins (its first micro-batch); again before it ends, nothing."""
        if self._step is None and self.session is not None:
            self._step = step
            self.session.step_begin(step)

    def step_end(self, counter: int | None = None) -> None:
        """The step begun ends, unless the trainer's optimizer-step ``counter``
        still reads it: then a micro-batch ended and the optimizer has not stepped."""
        if self._step is not None and counter != self._step:
            step, self._step = self._step, None
            self.session.step_end(step)

    # --- evaluation: its own windows when profile_eval is set -----------------------
    def eval_begin(self, loop: str) -> None:
        """A batch of evaluation loop ``loop`` begins (ending one still open)."""
        if self.eval_wanted:
            self.evals.begin(self.session, loop)

    def eval_end(self) -> None:
        """The evaluation batch open, if any, ends."""
        self.evals.end()

    # --- the end -------------------------------------------------------------------
    def close(self) -> None:
        """The trainer ends (or fails): write every open window and release the
        sessions; the next ``begin`` makes new ones. Never raises the profiler's errors."""
        if self.session is not None:
            self.session.close()
            self.written += self.session.written + self.evals.close()
        self.session, self._step = None, None


class ProfilingCallback:
    """What every trainer callback shows the user: the session running and the
    files written. A callback sets ``self.profiling`` to its `TrainerSession`."""

    profiling: TrainerSession

    @property
    def session(self) -> Session | None:
        """The training session while the trainer runs."""
        return self.profiling.session

    @property
    def written(self) -> list[Path]:
        """The profile files written so far."""
        return self.profiling.written
