"""Plain PyTorch steps for ``deepcontext run``: a step ends at each update of
the first optimizer that steps.

Installed when ``torch`` is imported, this costs one global optimizer
pre-hook that returns at once after the first update. At that update the
optimizer that stepped gets a post-hook of its own, which ends each step:
gradient accumulation and a second optimizer (a GAN's) still make one step
per update of the first. Step 0 ends at the first update, before anything
can be known about the loop, so windows start at step 1 at the earliest.

Torch runs the per-optimizer post-hooks before the global ones, and a window
opening or closing adds or removes global hooks (the adapter's optimizer
phase): doing it from the optimizer's own hook keeps torch's loop over the
global hooks intact.

An optimizer stepped by a training engine's ``step()`` (DeepSpeed's, whose
ZeRO optimizer steps torch's, then gathers the updated parameters) ends its
step where the engine's ``step()`` returns, when that call updated: the
engine gets a wrapper of its own for the rest of the run (inert once the
run's steps end), which calls what its class holds at each call (a window
wraps the class's ``step()`` in its optimizer phase). Step 0 still ends at
the first update, inside that call.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dc_core.collect.ownfiles import cut_own_frames

if TYPE_CHECKING:
    from dc_torch.loop import Profiler

logger = logging.getLogger("deepcontext")

#: Training engines whose ``step()`` steps the optimizer and does more after:
#: (the file of the module defining the engine, its class's method).
ENGINES = ((os.path.join("deepspeed", "runtime", "engine.py"), "step"),)
#: How far up the stack an engine's step is looked for from the optimizer's.
ENGINE_DEPTH = 16


class OptimizerSteps:
    """Drives a `Profiler` from the updates of the first optimizer that steps."""

    def __init__(self, launch: Any) -> None:
        self.launch = launch
        self.loop: Profiler | None = None
        self.first: Any = None  # handle of the global pre-hook
        self.post: Any = None  # handle of the optimizer's own post-hook
        self._seen = False
        self._started = False
        self.updates = 0  # the first optimizer's updates so far
        # (the engine, its method's name, our wrapper on it) while an engine's step ends steps
        self.engine: tuple[Any, str, Callable] | None = None

    def install(self) -> None:
        from torch.optim import optimizer as optimizer_mod

        self.first = optimizer_mod.register_optimizer_step_pre_hook(self._first_update)

    def _first_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # Inside torch's loop over the global pre-hooks: they must not change here,
        # so the steps are claimed (which may close the time range's window and
        # take its global hooks out) in the optimizer's own post-hook.
        if self._seen:
            return
        self._seen = True
        try:
            self._follow_engine()
            self.post = optimizer.register_step_post_hook(self._updated)
        except Exception as exc:  # fail-open: the script runs unprofiled
            logger.warning(
                "DeepContext could not follow the optimizer's steps (%r); this process runs unprofiled",
                exc,
            )

    def _updated(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.updates += 1
        loop = self.loop
        if loop is not None:
            if self.engine is None:  # else the engine's step, when it returns
                loop.step()
        # the first update ended step 0: step 1 begins, if the steps are ours
        elif not self._started:
            self._started = True
            try:
                self._adopt(optimizer)
            except Exception as exc:  # fail-open: the script runs unprofiled
                logger.warning(
                    "DeepContext could not follow the optimizer's steps (%r); this process runs "
                    "unprofiled",
                    exc,
                )

    def _adopt(self, optimizer: Any) -> None:
        launch = self.launch
        stepped = (
            f"each {type(self.engine[0]).__name__}.step{_caller(launch)} that updates (the engine "
            f"stepping {type(optimizer).__name__}, the first optimizer to step)"
            if self.engine is not None
            else f"each {type(optimizer).__name__}.step{_caller(launch)} (the first optimizer to step)"
        )
        if not launch.claim(f"{stepped}; step 0 ends at its first update"):
            return  # a trainer or the script's own profiler has them; this hook stays inert until close
        from dc_torch.loop import Profiler  # the adapter loads when there are steps to profile

        loop = Profiler(None, **launch.overrides)
        launch.adopt(loop.session, self.close)
        if loop.session.config.steps.start == 0 and loop.session.config.time_range is None:
            logger.warning(
                "DeepContext: step 0 of a plain PyTorch loop ends at the first optimizer update, "
                "before the loop is known; its window starts at step 1"
            )
        loop.current_step = 1
        self.loop = loop
        loop.start()

    def close(self) -> None:
        """Write the open window and take the hooks out."""
        for handle in (self.post, self.first):
            if handle is not None:
                handle.remove()
        self.post = self.first = None
        if self.loop is not None:
            self.loop.stop()
        engine, self.engine = self.engine, None
        if engine is not None:
            instance, name, wrapper = engine
            if vars(instance).get(name) is wrapper:
                del vars(instance)[name]

    # --- a training engine's step ----------------------------------------------
    def _follow_engine(self) -> None:
        """When this first update runs inside an engine's ``step()``, end the
        steps where that returns (see the module docstring)."""
        frame = sys._getframe(2)
        for _ in range(ENGINE_DEPTH):
            if frame is None:
                return
            code = frame.f_code
            if any(
                code.co_name == name and code.co_filename.endswith(file) for file, name in ENGINES
            ):
                engine = frame.f_locals.get("self")
                break
            frame = frame.f_back
        else:
            return
        name = code.co_name
        # the engine's method as its class has it now: a window's wrapper
        # (its phase) may stand over it
        method = getattr(type(engine), name, None)
        while method is not None and getattr(method, "__code__", None) is not code:
            method = getattr(method, "__wrapped__", None)
        if method is None:
            return
        steps = self

        def step(*args: Any, **kwargs: Any) -> Any:
            before = steps.updates
            # looked up at each call: windows wrap and unwrap the class's method
            current = getattr(type(engine), name)
            try:
                out = current(engine, *args, **kwargs)
            except BaseException as exc:  # the user's, with the traceback it has without us
                cut_own_frames(exc)
                raise
            loop = steps.loop
            if loop is not None and steps.engine is not None and steps.updates != before:
                try:
                    loop.step()
                except Exception as exc:  # fail-open: training goes on
                    logger.warning(
                        "DeepContext could not end a step at the engine's step (%r)", exc
                    )
            return out

        step.__wrapped__ = method  # type: ignore[attr-defined]
        step.__name__, step.__qualname__, step.__doc__ = (
            method.__name__,
            method.__qualname__,
            method.__doc__,
        )
        # on this engine alone, over whatever its class holds
        vars(engine)[name] = step
        self.engine = (engine, name, step)


def _caller(launch: Any) -> str:
    """`` at train.py:57``: the user's line that called ``step``, when there is one."""
    frame = sys._getframe(2)
    while frame is not None and not launch.own_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    return f" at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"


def install(launch: Any, torch: Any) -> None:
    """``torch`` was imported in a process of ``deepcontext run``: follow its optimizers."""
    OptimizerSteps(launch).install()
