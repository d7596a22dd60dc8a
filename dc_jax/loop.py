"""The plain-loop API: ``dc_jax.profile`` and ``dc_jax.Profiler``.

    with dc_jax.profile(logdir="runs/dc", steps=StepRange(start=5, count=3)) as prof:
        for batch in data:
            state, loss = train_step(state, batch)
            prof.step(state)  # the state: only with memory=True (parameters, optimizer state)

Step 0 begins when profiling starts; ``step()`` ends the current step and
begins the next. Outside windows a step costs a counter compare.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.loop import StepLoop
from dc_core.record.phase_scopes import NO_PHASE
from dc_jax.adapter import JaxAdapter


class Profiler(StepLoop):
    """Profiles the step windows of a JAX training loop.

    The rank and process count are JAX's (``jax.process_index()``, read at
    ``start()``) in a multi-process job unless ``rank``/``world_size`` are given. See
    `dc_core.record.loop.StepLoop` for the methods and attributes.

    Args:
        config: What to profile; ``overrides`` replace its fields and
            ``DEEPCONTEXT_CONFIG`` overrides both.
        adapter: The adapter to drive (default: a new `JaxAdapter`).
    """

    adapter: JaxAdapter

    def __init__(
        self,
        config: ProfilerConfig | None = None,
        *,
        adapter: JaxAdapter | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(
            adapter or JaxAdapter(), config, framework="jax", default_phase="other", **overrides
        )
        self._placed = "rank" in overrides or "world_size" in overrides

    def step(self, state: Any = None) -> None:
        """Mark the end of the current training step and the start of the next.

        Args:
            state: The train state after the step (any pytree: ``(params,
                opt_state)``, a Flax ``TrainState``, an NNX model or optimizer).
                With ``memory=True``, its leaves are told apart in the window's
                memory as parameters (under a ``params`` key, NNX ``Param``)
                and optimizer state (optax states, ``opt_state``, NNX
                ``OptState``), under their modules. Read only inside a window;
                nothing of it is kept but its arrays' identities.
        """
        if state is not None and self.session.in_window:
            try:
                self.adapter.note_state(state)
            except Exception as exc:  # the profiler's failure, never the user's step
                self.session.fail(exc, "jax train state")
        super().step()

    def phase(self, name: str) -> AbstractContextManager[Any]:
        """Mark host work (and the XLA runs it dispatches) as phase ``name``, e.g. "optimizer"."""
        scope = self.session.phase(name)
        return scope if scope is NO_PHASE else _Marked(self.adapter, name, scope)

    def _on_start(self) -> None:
        if not self._placed:
            # Read at start, not at construction: asking JAX starts its backends,
            # which must wait for a jax.distributed.initialize() after the constructor.
            rank, world = _process()
            if rank is not None:
                self.session.rank, self.session.world_size = rank, world
        self.adapter.open()  # Flax NNX modules are named from here on, before any window

    def _on_stop(self) -> None:
        self.adapter.close()


class _Marked:
    """A phase marked by the user: the session's phase scope plus its host time span,
    which places the XLA runs dispatched inside it (their trace has no Python phase)."""

    __slots__ = ("adapter", "name", "scope", "start")

    def __init__(self, adapter: JaxAdapter, name: str, scope: Any) -> None:
        self.adapter, self.name, self.scope, self.start = adapter, name, scope, 0

    def __enter__(self) -> _Marked:
        self.scope.__enter__()
        self.start = time.monotonic_ns()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.adapter.mark(self.name, self.start, time.monotonic_ns())
        return bool(self.scope.__exit__(*exc))


def _process() -> tuple[int | None, int | None]:
    """JAX's process index and count when the job is multi-process, else (None, None)."""
    import jax

    try:
        count = jax.process_count()
    except Exception:  # no backend: the environment decides
        return None, None
    return (jax.process_index(), count) if count > 1 else (None, None)


def profile(config: ProfilerConfig | None = None, **overrides: Any) -> Profiler:
    """A `Profiler` for ``with`` use: ``with dc_jax.profile(...) as prof: ... prof.step()``."""
    return Profiler(config, **overrides)
