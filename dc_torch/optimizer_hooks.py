"""Global optimizer-step hooks that can be taken out from inside one of them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from torch.optim import optimizer as optimizer_mod


class OptimizerHooks:
    """Global optimizer-step hooks, removable from inside one of them.

    torch iterates its registry of global optimizer hooks while it calls
    them: a handle removed from inside such a call (a failure there turns the
    profiler off at once) breaks that iteration with an error in the user's
    ``optimizer.step()``. So while one of these hooks runs, on any thread
    (torch's registry is process-wide), `remove` leaves the handles in (the
    hooks check their own switch and do nothing) and answers False; the
    session asks again at its next step boundary.

    Whether one runs is read from the threads' stacks, not counted: a
    Ctrl-C between a counter's increment and the ``try`` that undoes it
    left the count above zero, and the hooks in torch for good."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def register(
        self, pre: Callable[..., Any] | None = None, post: Callable[..., Any] | None = None
    ) -> None:
        if pre is not None:
            self.handles.append(optimizer_mod.register_optimizer_step_pre_hook(_ours(pre)))
        if post is not None:
            self.handles.append(optimizer_mod.register_optimizer_step_post_hook(_ours(post)))

    def remove(self) -> bool:
        """Remove the handles unless a hook of ours is running; True when none is left."""
        if _running():
            return False
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()
        return True


def _ours(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return hook(*args)

    return run


#: The code every hook of ours runs in, looked for on the threads' stacks.
_RUN = _ours(lambda: None).__code__


def _running() -> bool:
    """Whether a hook of ours is being called, on any thread."""
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code is _RUN:
                return True
            frame = frame.f_back
    return False
