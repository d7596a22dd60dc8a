"""The session: the state machine every integration drives.

Integrations call ``step_begin(step)`` / ``step_end(step)`` / ``phase(name)`` /
``close()``. The session opens and closes windows per the config, starts the
collector's sampler and monitor inside them, asks the framework adapter to
install its hooks, and writes one profile per window.

Failure policy: an exception raised by the profiler itself is logged once,
the session disables itself (hooks removed, threads stopped), what was already
collected is still written, and training goes on. The user's own exceptions
pass through unchanged.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from threading import get_ident
from typing import Any

from ..collect import collector as collector_mod
from ..collect.collector import (
    FLAG_BACKWARD,
    INNERMOST,
    KIND_OPERATOR,
    KIND_PHASE,
    MEASURE,
    ROOT_NODE,
    WHOLE_STACK,
)
from ..collect.ownfiles import skip_profiler_files
from ..store.logdir import profile_path
from ..store.profile import encode, mark_pending
from ..store.writer import ProfileWriter
from . import registry
from .adapter import Adapter, WindowSkipped
from .config import ProfilerConfig, resolve
from .environment import detect_host, detect_rank, environment
from .interrupts import deferred_interrupts
from .memory import PEAK_MARK, device_memory, window_memory
from .phase_scopes import NO_PHASE, PhaseScope, RegionScope
from .registry import active_sessions, open_sessions, watch_windows  # noqa: F401 (where integrations look)
from .snapshot import profile_from_snapshot, shift_step_bounds
from .state import OpenWindow, State, StepsSeen
from .step_clock import StepClock
from .windows import WindowSchedule

logger = logging.getLogger("deepcontext")


def _guarded(method: Callable) -> Callable:
    """Run a session method fail-open: profiler errors disable the session."""

    @functools.wraps(method)
    def wrapper(self: Session, *args: Any, **kwargs: Any) -> Any:
        if self.state is not State.ON:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # the profiler must never stop training
            self.fail(exc, method.__name__)
            return None

    return wrapper


class Session:
    """Drives windows, the collector and the adapter for one profiled process.

    Args:
        config: What to profile (resolved with ``overrides`` and
            ``DEEPCONTEXT_CONFIG``; invalid values raise ``ValueError`` here).
        framework: Name recorded in profiles ("torch", "jax", "python").
        adapter: Framework hooks installed while a window is open (none: the
            base `Adapter`, which hooks nothing).
        default_phase: Phase a step's work belongs to unless marked otherwise.
        rank, host: Override the detected rank/host.
        clock: Monotonic ns clock (tests pass a fake one).
    """

    def __init__(
        self,
        config: ProfilerConfig | None = None,
        *,
        framework: str = "python",
        adapter: Adapter | None = None,
        default_phase: str = "other",
        rank: int | None = None,
        host: str | None = None,
        world_size: int | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        **overrides: Any,
    ) -> None:
        self.config = resolve(config, **overrides)
        self.framework = framework
        self.adapter = adapter if adapter is not None else Adapter()
        self.default_phase = default_phase
        self.rank = detect_rank() if rank is None else rank
        self.world_size = world_size or int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.host = host or detect_host()
        self.clock = clock
        self.state = State.ON if self.config.enabled else State.OFF
        self.closed = False
        self.written: list[Path] = []  # once on disk (`close` waits for the writes under way)
        #: Called on the writer's thread with each profile once it is on disk.
        self.on_written: Callable[[Path], None] | None = None
        self._writer: ProfileWriter | None = None
        self._window: OpenWindow | None = None
        self._schedule = WindowSchedule(self.config.steps, self.config.time_range, clock())
        self._seen = StepsSeen(clock())
        self._pid = os.getpid()
        self._unrestored = False  # the adapter left a hook it could not remove yet (see _restore)
        self._collector: Any = None
        self._frames: dict[tuple, int] = {}
        self._steps = StepClock(clock)  # where the window's time is
        self.step_source = (
            ""  # what defined the steps, when not this session (`Profile.step_source`)
        )
        registry.opened(self)
        self._prepare()

    def _prepare(self) -> None:
        """Let the adapter pay its one-off costs now (building or loading an
        extension, warming tables), not in the first profiled step where the
        step times would not show them; a failure here is retried at install."""
        if self.disabled:
            return
        try:
            self.adapter.prepare(self)
        except Exception:  # install tries again and fails open there
            logger.debug("DeepContext adapter preparation failed", exc_info=True)

    # --- collector access for adapters -----------------------------------
    @property
    def collector(self) -> Any:
        if self._collector is None:
            self._collector = collector_mod.create_collector(
                prefer_native=self.config.collector == "native", max_nodes=self.config.max_nodes
            )
            skip_profiler_files(self._collector)
        return self._collector

    @property
    def disabled(self) -> bool:
        """Whether profiling is off for good (`State`: off, or failed)."""
        return self.state is not State.ON

    @property
    def window(self) -> tuple[int, int] | None:
        """The open window's planned steps ``(start, end_exclusive)``; None outside windows."""
        return self._window.planned if self._window is not None else None

    @property
    def in_window(self) -> bool:
        return self._window is not None

    @property
    def step_thread(self) -> int:
        """``threading.get_ident()`` of the thread that drives the steps (0 before the first)."""
        return self._steps.thread

    @property
    def last_step(self) -> int:
        """The step begun (or ended) last in a window; -1 before the first."""
        return self._steps.step

    def frame(
        self, kind: int, name: str, file: str = "", line: int = 0, detail: str = "", flags: int = 0
    ) -> int:
        """Interned frame id (cached on the Python side for the hot path)."""
        key = (kind, name, file, line, detail, flags)
        fid = self._frames.get(key)
        if fid is None:
            fid = self._frames[key] = self.collector.intern(kind, name, file, line, detail, flags)
        return fid

    def phase_frame(self, name: str) -> int:
        return self.frame(KIND_PHASE, name)

    # --- driving -----------------------------------------------------------
    def step_begin(self, step: int) -> None:
        """Call at the start of training step ``step``."""
        seen = self._seen
        if not seen.count:
            seen.first = step
        seen.count += 1
        seen.last = step
        if self.state is not State.ON or (
            self._window is None and not self._schedule.may_open(step)
        ):
            if self._unrestored:
                self._restore()
            return  # outside a window: the count above and one compare, nothing else
        self._step_begin(step)

    @_guarded
    def _step_begin(self, step: int) -> None:
        now = self.clock()
        if self._seen.first_checked_ns is None:
            self._seen.first_checked_ns = now
        if self._window is None:
            window = self._schedule.open_at(step, now)
            if window is None:
                return
            try:
                self._open(window, now)
            except WindowSkipped as skipped:
                if self._schedule.skip(window):  # the first skipped says so; the others follow it
                    logger.warning(
                        "DeepContext skips the window of steps %d–%d: %s",
                        window[0],
                        window[1] - 1,
                        skipped,
                    )
                return
        self._steps.begin(self.collector, self.phase_frame(self.default_phase), step)

    def step_end(self, step: int) -> None:
        """Call at the end of training step ``step``."""
        if self._window is None or self.state is not State.ON:
            if self._unrestored:
                self._restore()
            return
        self._step_end(step)

    @_guarded
    def _step_end(self, step: int) -> None:
        self._steps.end(self.collector, self.adapter.step_overhead_ns(), step)
        if self._schedule.should_close(step, self.clock(), self._window.opened_ns):
            self._close_window(step + 1)
        else:
            self._steps.between(self.collector, self.phase_frame("other"))

    def cut_time_range(self) -> None:
        """Close an open time-range window at the next step end, before its
        duration is up (the process ends, or a step driver takes over)."""
        self._schedule.cut()

    def phase(self, name: str, below_caller: bool = False) -> Any:
        """Context manager marking work as phase ``name`` (e.g. "optimizer").

        ``below_caller``: what runs inside keeps only its Python frames below
        the line that entered the phase (an adapter's backward pass: a hook's
        lines, a checkpoint's recomputed forward; autograd's own work between
        functions has none and goes with the function before it), not the
        caller's frames above them."""
        if self._window is None or self.disabled:
            return NO_PHASE
        return PhaseScope(self, name, below_caller)

    def update_end(self) -> None:
        """An optimizer update ended (adapters call this after each ``step()``
        of an optimizer). Once the step running has made as many updates as the
        step before it, the rest of the step (host reads of the loss, logging,
        a scheduler) is phase ``other``, not the default phase it began in."""
        if self._window is not None and not self.disabled and get_ident() == self._steps.thread:
            self._update_end()

    @_guarded
    def _update_end(self) -> None:
        self._steps.update_end(self.collector, self.phase_frame("other"))

    @_guarded
    def _enter_phase(self, name: str, below_caller: bool = False) -> int:
        depth = self.collector.depth()
        # below the caller: the user depth measured here, so captures inside start below this call
        self.collector.enter(
            [self.phase_frame(name)], ROOT_NODE, False, MEASURE if below_caller else WHOLE_STACK
        )
        self._steps.phase_entered()
        return depth

    def region(self, name: str, backward: bool = False) -> Any:
        """Context manager timing a hand-marked operator ``name`` under the
        calling Python line (for code no adapter intercepts)."""
        if self._window is None or self.disabled:
            return NO_PHASE
        return RegionScope(
            self, self.frame(KIND_OPERATOR, name, flags=FLAG_BACKWARD if backward else 0)
        )

    @_guarded
    def _enter_region(self, frame: int) -> int:
        depth = self.collector.depth()
        self.collector.enter([frame], INNERMOST, True)
        return depth

    @_guarded
    def _leave_phase(self, depth: int, phase: bool = False) -> None:
        if self._window is None:
            return
        self.collector.unwind(depth)
        if phase:
            self._steps.phase_left(self.collector)

    def close(self) -> None:
        """Flush an open window (with the steps it saw) and release everything."""
        if self.closed:
            return
        self.closed = True
        ours = os.getpid() == self._pid
        try:
            if self._window is not None and not self.disabled and ours:
                try:
                    self._close_window(self._steps.step + 1)
                except Exception as exc:
                    self.fail(exc, "close")
        finally:
            # interrupted before the window closed: unhook all the same
            if self._window is not None and ours:
                self._window = None
                try:
                    self._stop_collecting()
                except Exception:  # closing never raises the profiler's errors
                    logger.debug("DeepContext: unhooking at close failed", exc_info=True)
            if self._unrestored and not self._restore():
                logger.debug("DeepContext: a mode of a failed window was not on its stack at close")
            self._unrestored = False  # nothing more can be done: what is left stays inert
            self._track()
            if self._writer is not None and ours:
                with deferred_interrupts():  # the last window's file is on disk when close returns
                    self._writer.close()
            if ours and not self.disabled and not self.written and not self._schedule.skips:
                logger.warning(self._nothing_written())

    def _nothing_written(self) -> str:
        """Why a session closed without a profile: what it saw, what it waited for, where files go."""
        where = (
            Path(self.config.logdir) / self.config.run
            if self.config.run
            else Path(self.config.logdir)
        )
        return (
            f"DeepContext wrote no profile: {self._seen.said()}; it profiles {self._schedule.describe()}; "
            f"profiles would go to {where}"
        )

    # --- windows -------------------------------------------------------------
    def _open(self, window: tuple[int, int], now: int) -> None:
        if os.getpid() != self._pid:  # a forked child never profiles on its parent's behalf
            self.state = State.OFF
            return
        c = self.collector
        c.reset()
        self._window = OpenWindow(window, now, time.time_ns())
        self._track()
        self._steps.open_window()
        try:
            with deferred_interrupts():  # Ctrl-C waits until the hooks are all in (or all out)
                self.adapter.install(self)
                if self.config.cpu_sampling_hz > 0:
                    c.start_sampler(
                        self.config.cpu_sampling_hz, self.config.mode == "comprehensive"
                    )
                if self.config.system_interval_ms > 0:
                    c.start_monitor(self.config.system_interval_ms)
        except BaseException:
            self._window = None
            try:
                self._stop_collecting()
            except Exception:  # the first error is the one to report
                logger.debug("DeepContext: unhooking after a failed open failed too", exc_info=True)
            raise

    def _stop_collecting(self) -> None:
        """Stop the threads and unhook the framework: every part is tried even
        when another fails (the first error is raised after)."""
        with deferred_interrupts():
            try:
                c = self._collector
                if c is not None:
                    try:
                        c.stop_sampler()
                    finally:
                        c.stop_monitor()
            finally:
                restored = False
                try:
                    restored = self.adapter.uninstall(self) is not False
                finally:  # what is left is retried at the next step boundary (see _restore)
                    self._unrestored = not restored
                    self._track()

    def _restore(self) -> bool:
        """Ask the adapter to remove what its uninstall could not (see
        ``Adapter.restore``); never raises. Until it has, every step boundary asks again."""
        try:
            with deferred_interrupts():
                self._unrestored = not self.adapter.restore()
        except Exception:  # a hook that cannot be removed stays inert
            logger.debug("DeepContext could not restore every hook", exc_info=True)
            self._unrestored = False
        self._track()
        return not self._unrestored

    def _track(self) -> None:
        """Keep this session in the registry exactly while hooks of its may be in."""
        registry.track(self, self._window is not None or self._unrestored)

    def _close_window(self, end: int) -> None:
        # A window closes whole, unhooked and then written: a Ctrl-C meanwhile
        # waits for both (writing is bounded: one profile of at most max_nodes).
        with deferred_interrupts():
            window = self._window
            start = window.planned[0]
            # first: stopping the profiler's threads is not the user's time
            self._steps.close(self.collector)
            try:
                self._stop_collecting()
            finally:  # what was collected is written even when unhooking failed
                self._window = None
                self._track()
                self.collector.unwind(0)
                self._write(window, (start, max(end, start + 1)))
                self.collector.reset()

    def _write(self, window: OpenWindow, steps: tuple[int, int]) -> None:
        env = environment(self.framework, self.config.mode)
        env.update(self.adapter.environment())
        snap = self.collector.snapshot()
        try:
            shift_step_bounds(snap, self.adapter.step_bound_shifts())
        except Exception as exc:  # the window is still written, its bounds as the steps marked them
            self.fail(exc, "step bounds")
        memory, missing, note = window_memory(
            self.config, self.adapter, self.collector, snap, self.fail
        )
        carried: dict[str, list[int]] = {PEAK_MARK + d["device"]: [] for d in memory}
        profile = profile_from_snapshot(
            snap,
            self.collector.monitor_samples(),
            carried=carried,
            steps=steps,
            **self._steps.profile_fields(),
            window_t0=window.opened_ns,
            run=self.config.run or ".",
            rank=self.rank,
            host=self.host,
            framework=self.framework,
            mode=self.config.mode,
            env=env,
            start_unix_ns=window.opened_unix_ns,
            duration_ns=self.clock() - window.opened_ns,
            init_ns=self._seen.init_ns(),
            world_size=self.world_size,
        )
        profile.memory = device_memory(
            memory,
            carried,
            profile.tree,
            window_t0=window.opened_ns,
            step_begins_ns=self._steps.begins,
            first_step=steps[0],
        )
        profile.memory_missing, profile.memory_note = missing, note
        # Analysis is left to whoever reads the window (`analyzer.findings_of`):
        # it costs milliseconds, which the training thread would pay here.
        mark_pending(profile, dict(self.config.analyzer))
        if self.config.time_range is None:
            profile.planned_window = window.planned  # what it planned: a loop may end it early
        profile.step_source = self.step_source
        # a window that holds it shows its one-off costs apart
        profile.first_step = self._seen.first
        path = profile_path(
            self.config.logdir, self.config.run, profile.rank, profile.host, profile.steps
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._write_failed(path, exc)
            return
        # Visible under its name when this returns; its fsync runs off this thread (`store.writer`).
        if self._writer is None:
            self._writer = ProfileWriter(self._written, self._write_failed)
        self._writer.submit(encode(profile), path)

    def _written(self, path: Path) -> None:
        self.written.append(path)
        logger.info("DeepContext wrote %s", path)
        if self.on_written is not None:
            try:
                self.on_written(path)
            except Exception:  # a message is never worth the writer
                logger.debug("DeepContext: on_written failed", exc_info=True)

    def _write_failed(self, path: Path, exc: OSError) -> None:
        # Every later window would fail the same way: stop paying for them.
        logger.warning(
            "DeepContext could not write its profile under %s (%s); profiling stops",
            self.config.logdir,
            exc,
        )
        if self.state is State.ON:  # a failure before stays the reason
            self.state = State.OFF

    # --- failure ---------------------------------------------------------------
    def fail(self, exc: BaseException, where: str) -> None:
        """Log once, disable, keep what was collected; never raises."""
        if self.state is State.FAILED:
            return
        self.state = State.FAILED
        logger.error(
            "DeepContext disabled itself after an internal error in %s: %r",
            where,
            exc,
            exc_info=exc,
        )
        try:
            with deferred_interrupts():
                window = self._window
                if window is not None:
                    start = window.planned[0]
                    steps = (start, max(self._steps.step + 1, start + 1))
                    self._steps.close(self.collector)
                    try:
                        self._stop_collecting()
                    finally:
                        self._window = None
                    self._write(window, steps)
        except Exception:  # nothing more can be saved
            logger.debug("DeepContext could not save the partial window", exc_info=True)
        finally:
            self._track()
