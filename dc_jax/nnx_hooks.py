"""Flax NNX module structure in JAX's name stack: each module call under its attribute path.

Linen runs every module method under ``jax.named_scope`` itself, so its ops
carry ``MLP/Dense_0`` in their name stack. NNX does not: an NNX model's ops
carry only the Python stack (``MLP.__call__`` → ``Linear.__call__``), which
cannot tell ``layers[0]`` from ``layers[1]`` when a loop calls them from one
line. So while a profiler lives, `NnxScopes` wraps the ``__call__`` of every
``nnx.Module`` class and, while JAX traces, runs each module call under a
named scope holding the module's attribute path from the outermost module
called, written as Linen paths are: the root's class, then the path parts
joined by ``/`` (``MLP``, ``MLP/linear1``, ``MLP/layers/0``). It records each
path's class, so module frames read ``MLP/layers/0 (Linear)``.

It acts at trace time only: a jitted step runs compiled code and never calls
the wrappers; an eager (untraced) call passes straight through. Since the
scopes must be there when the step is traced, which is usually before the
first window, it is started with the profiler, not with each window. Classes
defined after it started are wrapped when the next window opens.

Not named (their ops stay in the calling module's scope, under its Python
lines): steps traced before the profiler started; modules reached only
through a copy an NNX transform made inside a module call (``nnx.remat``,
``nnx.scan`` over layers), which are not in the root's module tree.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from typing import Any, Callable

logger = logging.getLogger("deepcontext")

_MARK = "__deepcontext_nnx__"  # set on our wrappers: never wrap a wrapper
_MAX_PATHS = 100_000  # bounded memory even for a model re-created in a loop


def flax_nnx() -> Any:
    """``flax.nnx`` if the program imported it, else None: a program that
    defines no NNX module has nothing to name, and need not pay for the import."""
    return sys.modules.get("flax.nnx")


def _subclasses(root: type) -> list[type]:
    seen, todo = {root}, [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return list(seen)


def _tracing(args: tuple, kwargs: dict) -> bool:
    """Whether a module call's inputs are being traced (under jit, grad, vmap...)."""
    import jax

    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs)))


class NnxScopes:
    """Names NNX module calls in the name stack and records ``{path: class name}``.

    ``start()`` wraps the module classes, ``refresh()`` wraps classes defined
    since, ``stop()`` restores them.
    """

    def __init__(self) -> None:
        self.classes: dict[str, str] = {}
        self._originals: dict[type, Callable] = {}
        self._local = threading.local()
        self._started = False

    def start(self) -> bool:
        if flax_nnx() is None or self._started:
            return False
        self._started = True
        self.refresh()
        return True

    def refresh(self) -> None:
        nnx = flax_nnx()
        if nnx is None or not self._started:
            return
        for cls in _subclasses(nnx.Module):
            call = cls.__dict__.get("__call__")
            if call is None or cls in self._originals or getattr(call, _MARK, False) or not callable(call):
                continue
            self._originals[cls] = call
            type.__setattr__(cls, "__call__", self._wrap(call))

    def stop(self) -> None:
        originals, self._originals, self._started = self._originals, {}, False
        for cls, call in originals.items():
            try:
                type.__setattr__(cls, "__call__", call)
            except Exception:  # a class that forbids it keeps a pass-through wrapper
                logger.debug("DeepContext could not restore %s.__call__", cls.__name__, exc_info=True)

    def _wrap(self, call: Callable) -> Callable:
        scopes = self

        @functools.wraps(call)
        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            scope = scopes._enter(module, args, kwargs) if scopes._started else None
            if scope is None:
                return call(module, *args, **kwargs)
            import jax

            try:
                with jax.named_scope(scope):
                    return call(module, *args, **kwargs)
            finally:
                scopes._local.stack.pop()

        setattr(__call__, _MARK, True)
        return __call__

    def _enter(self, module: Any, args: tuple, kwargs: dict) -> str | None:
        """The scope to push for this call (and push its entry), or None for no scope."""
        try:
            stack = self._local.__dict__.setdefault("stack", [])
            if stack and stack[-1][0] is module:
                return None  # ``super().__call__``: already inside this module's scope
            if not stack:
                if not _tracing(args, kwargs):
                    return None
                root = type(module).__name__
                paths = {id(m): tuple(map(str, p)) for p, m in flax_nnx().iter_modules(module)}
                self._record(root, root)
                stack.append((module, paths, (), root))  # last: the wrapper pops what was pushed
                return root
            _, paths, parent, root = stack[-1]
            path = paths.get(id(module))
            if path is None or path[: len(parent)] != parent or len(path) == len(parent):
                return None  # not below the calling module: its ops stay in the caller's scope
            self._record("/".join((root, *path)), type(module).__name__)
            stack.append((module, paths, path, root))
            return "/".join(path[len(parent):])
        except Exception:  # naming must never break the model call
            logger.debug("DeepContext could not name an NNX module call", exc_info=True)
            return None

    def _record(self, path: str, cls: str) -> None:
        if path not in self.classes and len(self.classes) < _MAX_PATHS:
            self.classes[path] = cls
