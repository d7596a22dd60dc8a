"""Flax module structure as the model runs: name-stack path → module class.

JAX's name stack says *where* an op sits (``MLP/Dense_0``) but not what the
module is; the Linen method interceptor sees each module call and records its
class under the same path, so module frames carry the model's own names and
classes (``MLP/proj (Dense)``, not a guess from the name). It is installed only
while a window is open; modules traced before the window get their class from
the Python stack instead (see ``context.context_of``).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("deepcontext")


def flax_linen() -> Any:
    """``flax.linen`` if installed (imported lazily), else None."""
    try:
        import flax.linen as nn
    except ImportError:
        return None
    return nn


def module_path(module: Any) -> str | None:
    """The name-stack path of a bound Linen module: root class, then its scope path."""
    nn = flax_linen()
    root = module
    while nn is not None and isinstance(getattr(root, "parent", None), nn.Module):
        root = root.parent  # a Scope, None or a sentinel above means ``root`` is the top
    try:
        path = tuple(module.path)
    except Exception:  # an unbound module has no path
        return None
    return "/".join((type(root).__name__, *map(str, path)))


class ModuleRecorder:
    """Records ``{path: class name}`` of every Linen module called while started.

    Use ``start()`` when a window opens and ``stop()`` when it closes; the
    interceptor stays on the calling thread's Flax interceptor stack between.
    """

    def __init__(self) -> None:
        self.classes: dict[str, str] = {}
        self._scope: Any = None

    def start(self) -> bool:
        nn = flax_linen()
        if nn is None or self._scope is not None:
            return False
        self._scope = nn.intercept_methods(self._intercept)
        self._scope.__enter__()
        return True

    def stop(self) -> None:
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.__exit__(None, None, None)

    def _intercept(self, next_fun: Any, args: Any, kwargs: Any, context: Any) -> Any:
        try:
            if context.method_name in ("__call__", "setup") or not context.method_name.startswith(
                "_"
            ):
                path = module_path(context.module)
                if path is not None and path not in self.classes:
                    self.classes[path] = type(context.module).__name__
        except Exception:  # recording must never break the model call
            logger.debug("DeepContext could not record a Flax module", exc_info=True)
        return next_fun(*args, **kwargs)
