"""The plain-loop API: ``dc_jax.profile`` and ``dc_jax.Profiler``.

    with dc_jax.profile(logdir="runs/dc", steps=StepRange(start=5, count=3)) as prof:
        for batch in data:
            state, loss = train_step(state, batch)
            prof.step()

Step 0 begins when profiling starts; ``step()`` ends the current step and
begins the next. Outside windows a step costs a counter compare.
"""

from __future__ import annotations

import time
from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.session import Session

from dc_jax.adapter import JaxAdapter


class _Marked:
    """A phase marked by the user: the session's phase scope plus its host time span."""

    __slots__ = ("profiler", "name", "scope", "start")

    def __init__(self, profiler: "Profiler", name: str, scope: Any) -> None:
        self.profiler, self.name, self.scope, self.start = profiler, name, scope, 0

    def __enter__(self) -> "_Marked":
        self.scope.__enter__()
        self.start = time.monotonic_ns()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.profiler._adapter.mark(self.name, self.start, time.monotonic_ns())
        return bool(self.scope.__exit__(*exc))


class Profiler:
    """Profiles the step windows of a JAX training loop.

    Args:
        config: What to profile; ``overrides`` replace its fields and
            ``DEEPCONTEXT_CONFIG`` overrides both.
    """

    def __init__(self, config: ProfilerConfig | None = None, **overrides: Any) -> None:
        self._config, self._overrides = config, overrides
        self._adapter = JaxAdapter()
        self.session: Session | None = None
        self.current_step = 0

    def start(self) -> "Profiler":
        """Begin step 0 (and a window, if one starts there)."""
        if self.session is None:
            rank, world = _process()
            self.session = Session(
                self._config, framework="jax", adapter=self._adapter, default_phase="other",
                rank=rank, world_size=world, **self._overrides,
            )
            self.current_step = 0
            self._adapter.open()
            self.session.step_begin(0)
        return self

    def step(self) -> None:
        """End the current step and begin the next one."""
        session = self.session
        if session is None:
            return
        session.step_end(self.current_step)
        self.current_step += 1
        session.step_begin(self.current_step)

    def phase(self, name: str) -> Any:
        """Mark host work (and the XLA runs it dispatches) as phase ``name``, e.g. "optimizer"."""
        session = self.session
        if session is None or not session.in_window:
            return session.phase(name) if session is not None else _NOTHING
        return _Marked(self, name, session.phase(name))

    def stop(self) -> None:
        """Flush an open window and release the trace; idempotent."""
        if self.session is not None:
            try:
                self.session.close()
            finally:
                self._adapter.close()

    @property
    def written(self) -> list:
        """Profile files written so far."""
        return list(self.session.written) if self.session is not None else []

    def __enter__(self) -> "Profiler":
        try:
            return self.start()
        except BaseException:  # e.g. Ctrl-C while starting: no ``__exit__`` will come to unhook
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


_NOTHING = _Nothing()


def _process() -> tuple[int | None, int | None]:
    """JAX's process index and count when the job is multi-process, else (None, None)."""
    import jax

    try:
        count = jax.process_count()
    except Exception:  # noqa: BLE001 - no backend: the environment decides
        return None, None
    return (jax.process_index(), count) if count > 1 else (None, None)


def profile(config: ProfilerConfig | None = None, **overrides: Any) -> Profiler:
    """A `Profiler` for ``with`` use: ``with dc_jax.profile(...) as prof: ... prof.step()``."""
    return Profiler(config, **overrides)
