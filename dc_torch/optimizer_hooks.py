"""Global optimizer-step hooks that can be taken out from inside one of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim import optimizer as optimizer_mod


class OptimizerHooks:
    """Global optimizer-step hooks, removable from inside one of them.

    torch iterates its registry of global optimizer hooks while it calls
    them: a handle removed from inside such a call (a failure there turns the
    profiler off at once) breaks that iteration with an error in the user's
    ``optimizer.step()``. So while one of these hooks runs, `remove` leaves
    the handles in (the hooks check their own switch and do nothing) and
    answers False; the session asks again at its next step boundary."""

    #: Calls of any such hook of ours under way (torch's registry is process-wide).
    running = 0

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def register(
        self, pre: Callable[..., Any] | None = None, post: Callable[..., Any] | None = None
    ) -> None:
        if pre is not None:
            self.handles.append(optimizer_mod.register_optimizer_step_pre_hook(_counted(pre)))
        if post is not None:
            self.handles.append(optimizer_mod.register_optimizer_step_post_hook(_counted(post)))

    def remove(self) -> bool:
        """Remove the handles unless a hook of ours is running; True when none is left."""
        if OptimizerHooks.running:
            return False
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()
        return True


def _counted(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        OptimizerHooks.running += 1
        try:
            return hook(*args)
        finally:
            OptimizerHooks.running -= 1

    return run
