"""Optimizer closures run in the step's own phase, not in the optimizer phase.

``optimizer.step(closure)`` — Lightning's automatic optimization, LBFGS —
runs the forward and backward pass inside ``step``, so the optimizer phase
opened by torch's step pre-hook would swallow them. A second global pre-hook,
registered after the phase hook, hands ``step`` a wrapped closure that runs
in the session's default phase (backward still marks itself inside it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dc_core.collect.ownfiles import cut_own_frames
from dc_torch.optimizer_hooks import OptimizerHooks

if TYPE_CHECKING:
    from dc_torch.hub import Hub


class ClosureHooks:
    """Installs and removes the closure-wrapping optimizer pre-hook."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.hooks = OptimizerHooks()

    def install(self) -> None:
        self.hooks.register(pre=self.pre)

    def uninstall(self) -> bool:
        """False while the hook must wait to be taken out (`OptimizerHooks`)."""
        return self.hooks.remove()

    def pre(self, optimizer: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not self.hub.active:
            return None
        try:
            closure = kwargs.get("closure")
            if callable(closure):
                return args, {**kwargs, "closure": self.wrap(closure)}
            if len(args) > 1 and callable(args[1]):  # args[0] is the optimizer
                return (args[0], self.wrap(args[1]), *args[2:]), kwargs
        except Exception as exc:
            self.hub.fail(exc, "closure")
        return None

    def wrap(self, closure: Callable) -> Callable:
        session = self.hub.session

        @functools.wraps(closure)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                with session.phase(session.default_phase):  # a no-op once the window has closed
                    return closure(*args, **kwargs)
            except BaseException as exc:  # the user's, with the traceback it has without us
                cut_own_frames(exc)
                raise

        return run
