"""One profiled process of ``deepcontext run``: hooks the frameworks as they load.

`boot` runs from the injected ``sitecustomize`` before the script. It
imports no framework: it registers callbacks run right after ``torch``,
the trainers' modules or ``jax`` load (`imports.AfterImport`), starts the
time-range fallback and arranges for open windows to be written when the
process ends. `Launch` is the state those drivers share: which of them found
the steps first (the others stand down), and what to close at the end.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from .imports import AfterImport
from .settings import RunSettings

logger = logging.getLogger("deepcontext")


class Launch:
    """What the step drivers of one profiled process share.

    Args:
        settings: The run's settings.

    Attributes:
        source: What defined the steps (``"each SGD.step at train.py:57 …"``,
            ``"each call of jax.jit train_step, called repeatedly at train.py:65; step
            0 is call 3"``), once a driver claimed them.
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.source: str | None = None
        self.pid = os.getpid()
        self._closers: list[Callable[[], None]] = []
        self._ours: list[Any] = []  # sessions of our drivers: not "the user's own"
        self._lock = threading.Lock()
        self._done = threading.Event()  # the process is ending
        # the time-range thread and the end never drive a session at once
        self._closing = threading.RLock()
        self._provisional = False  # the steps are the time range's until a driver finds real ones
        self._interim: Any = None  # the time range's loop while it may still be open
        self._watching = False  # SIGTERM is watched from the first claim on

    @property
    def overrides(self) -> dict[str, Any]:
        """Config fields every session of the run takes: its logdir and run."""
        return {"logdir": self.settings.logdir, "run": self.settings.run}

    def claim(self, source: str, provisional: bool = False) -> bool:
        """A driver found the steps (``source`` says how): True when they are its
        to profile; False when another driver claimed them first or the user's
        own DeepContext session is running (the driver stands down).

        Steps found after the time-range fallback began (a model that loads for
        minutes, a JAX step known at its third call) are still claimed: the time
        range's window is written as it stands, and the steps take over. So the
        caller must be where that window's hooks may come out. ``provisional``:
        the fallback's own claim, which real steps may take over."""
        with self._lock:
            if (
                (self.source is not None and (provisional or not self._provisional))
                or os.getpid() != self.pid
                or self.user_profiling()
            ):
                return False
            self.source, self._provisional = source, provisional
        with self._closing:
            self._end_time_range()
        if not self._watching:
            self._watching = True
            from ..record import (
                session as session_mod,  # imported with the first driver, not at startup
            )

            session_mod.watch_windows(self.watch_windows)
        return True

    def adopt(self, session: Any, close: Callable[[], None]) -> None:
        """Our driver's ``session``: ``close`` writes its open window when the process ends."""
        session.step_source = self.source or ""
        self._ours.append(session)
        self._closers.append(close)

    def owns(self, session: Any) -> bool:
        """Whether ``session`` was adopted (`adopt`)."""
        return any(s is session for s in self._ours)

    def user_profiling(self) -> bool:
        """Whether a DeepContext session our drivers did not make is open."""
        # None was made if it is not loaded (or still being imported, half made).
        open_sessions = getattr(sys.modules.get("dc_core.record.session"), "open_sessions", None)
        return open_sessions is not None and any(s not in self._ours for s in open_sessions())

    def own_file(self, filename: str) -> bool:
        """Whether ``filename`` is the user's code: not the standard library,
        not an installed package, not the profiler."""
        if not filename or filename.startswith("<"):
            return False
        return not os.path.abspath(filename).startswith(_library_roots())

    # --- the end ------------------------------------------------------------------
    def close_all(self) -> None:
        """Write every open window: our drivers', then any other session's still in
        a window (a trainer's that never saw its end); never raises."""
        if os.getpid() != self.pid:
            return
        with self._closing:
            try:
                self._close_all()
            except Exception:  # the script's exit is never the profiler's error
                logger.warning(
                    "DeepContext could not write every open window at exit", exc_info=True
                )

    def _close_all(self) -> None:
        self._done.set()
        self._end_time_range()
        for close in reversed(self._closers):
            try:
                close()
            except Exception:  # closing is fail-open like the rest
                logger.debug("DeepContext: closing a driver failed", exc_info=True)
        # A module the time-range thread is still importing is in sys.modules
        # half made: it has no session of ours yet, nor anything to flush.
        active = getattr(sys.modules.get("dc_core.record.session"), "active_sessions", None)
        for session in active() if active is not None else ():
            session.close()
        flush_all = getattr(sys.modules.get("dc_core.store.writer"), "flush_all", None)
        # windows closed before, still being written (SIGTERM ends us next)
        if flush_all is not None:
            flush_all()

    def _end_time_range(self) -> None:
        """Write the time range's window if it is still open; its one step is
        the time until now (cut short when steps were found or the process ends)."""
        interim, self._interim = self._interim, None
        if interim is None:
            return
        try:
            interim.session.cut_time_range()
            interim.step()
            interim.stop()
        except Exception:  # fail-open: whatever it holds is lost, the process goes on
            logger.warning("DeepContext could not write the time range's window", exc_info=True)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """SIGTERM with no handler of the script's: write the windows, then end the
        way SIGTERM would have (killed by the signal)."""
        self.close_all()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def watch_windows(self, open_now: bool) -> None:
        """Around open windows only (main thread), SIGTERM writes them before the
        process dies; outside them, and whenever the script set its own handler,
        SIGTERM is left alone."""
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if open_now and current is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        elif not open_now and current == self._on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    # --- no step boundary: a time range ---------------------------------------------
    def start_fallback(self) -> None:
        """After ``fallback_after_s`` with no step boundary found, profile by time."""
        if self.settings.fallback_after_s <= 0:
            return
        thread = threading.Thread(target=self._fallback, name="deepcontext-time-range", daemon=True)
        thread.start()

    def _fallback(self) -> None:
        wait = self.settings.fallback_after_s
        if self._done.wait(wait):
            return
        if not self.claim(
            f"a time range: no step boundary in the first {wait:g} s", provisional=True
        ):
            return
        try:
            with self._closing:
                # the end, or real steps, came first
                if self._done.is_set() or not self._provisional:
                    return
                loop = self._interim = _time_loop(self)
                self.adopt(loop.session, loop.stop)
                loop.start()
            self._done.wait(loop.session.config.time_range.duration_s)
            with self._closing:  # a no-op when the end or real steps came first and closed it
                self._end_time_range()  # its one "step" is the time range
        except Exception as exc:  # fail-open: the process runs unprofiled
            logger.warning("DeepContext could not profile by time range: %r", exc)


def _time_loop(launch: Launch) -> Any:
    """A plain loop of the framework the process imported (the first adapter
    package's whose framework is loaded), set to one window of
    ``--time-window`` seconds (the config's ``time_range`` is for step drivers:
    it makes their windows timed)."""
    from ..record.adapter import adapter_packages, load

    window = {"start_after_s": 0.0, "duration_s": launch.settings.time_window_s}
    overrides = {**launch.overrides, "time_range": window}
    for package in adapter_packages():
        if package.time_loop is not None and package.time_loop[0] in sys.modules:
            return load(package.time_loop[1])(None, **overrides)
    from ..record.loop import StepLoop

    return StepLoop(None, None, framework="python", default_phase="other", **overrides)


@functools.cache  # asked per call while a JAX step is sought; packages do not move
def _library_roots() -> tuple[str, ...]:
    """Path prefixes of code that is not the user's: the interpreter's library,
    installed packages, the frameworks and the profiler."""
    import sysconfig

    from ..collect.ownfiles import FRAMEWORK_PACKAGES, framework_prefixes, profiler_files

    roots = {
        sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    roots |= {os.path.dirname(p) for p in profiler_files() if os.path.basename(p) == "__init__.py"}
    for framework in FRAMEWORK_PACKAGES:
        roots.update(framework_prefixes(framework))
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


def boot(settings: RunSettings) -> Launch:
    """Hook this process for the run: drivers on framework imports, the time
    fallback, windows written at exit. Imports no framework."""
    launch = Launch(settings)
    _log_to_run(settings)
    AfterImport(drivers(launch)).install()
    atexit.register(launch.close_all)
    launch.start_fallback()
    return launch


def drivers(launch: Launch) -> dict[str, Callable[[Any], None]]:
    """``module name -> callback(module)``: the step drivers the installed
    adapter packages start when a module of theirs is imported (`AdapterPackage.drivers`)."""
    from ..record.adapter import adapter_packages

    targets: dict[str, list[str]] = {}
    for package in adapter_packages():
        for module, target in package.drivers.items():
            targets.setdefault(module, []).append(target)
    return {module: _driver(found, launch) for module, found in targets.items()}


def _driver(targets: list[str], launch: Launch) -> Callable[[Any], None]:
    def run(module: Any) -> None:
        from ..record.adapter import load

        for target in targets:
            load(target)(launch, module)

    return run


def _log_to_run(settings: RunSettings) -> None:
    """The profiler's messages go to the run's log, which ``deepcontext run``
    prints at the end: the script's own stderr stays as it is."""
    os.makedirs(settings.log_dir, exist_ok=True)
    handler = logging.FileHandler(
        os.path.join(settings.log_dir, f"{os.getpid()}.log"), encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    logger.propagate = False
    with open(handler.baseFilename, "a", encoding="utf-8") as file:
        file.write(f"PROCESS {os.getpid()} {' '.join(getattr(sys, 'orig_argv', sys.argv))[:400]}\n")
