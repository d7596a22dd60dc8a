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
defined after it started are wrapped as they are defined (a hook on
``nnx.Module.__init_subclass__``, removed when it stops).

An NNX transform inside a module call (``nnx.scan`` or ``nnx.vmap`` over
stacked Blocks, ``nnx.remat``) calls a copy it made of the module, which is
not in the root's module tree: the copy takes the path of the nearest module
of its class below the calling module (told apart by its variables' shapes,
a scanned copy's being the original's less the scanned axis, when several
are as near). Not named (their ops stay in the calling module's scope, under its
Python lines): steps traced before the profiler started, copies not told apart.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from dc_core.collect.ownfiles import cut_own_frames

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

    return any(
        isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs))
    )


class _Call(NamedTuple):
    """A module call being traced: the module, the root's module tree (by id and
    by path), the module's path in it and the root's class name."""

    module: Any
    paths: dict[int, tuple[str, ...]]
    tree: dict[tuple[str, ...], Any]
    path: tuple[str, ...]
    root: str


class NnxScopes:
    """Names NNX module calls in the name stack and records ``{path: class name}``.

    ``start()`` wraps the module classes (and those defined later, as they are
    defined), ``refresh()`` wraps classes defined before and missed, ``stop()``
    restores them.
    """

    def __init__(self) -> None:
        self.classes: dict[str, str] = {}
        self._originals: dict[type, Callable] = {}
        self._local = threading.local()
        self._started = False
        self._hook: tuple[type, Any] | None = (
            None  # (nnx.Module, its own __init_subclass__ or None)
        )

    def start(self) -> bool:
        if flax_nnx() is None or self._started:
            return False
        self._started = True
        self.refresh()
        self._hook_subclasses()
        return True

    def refresh(self) -> None:
        nnx = flax_nnx()
        if nnx is None or not self._started:
            return
        for cls in _subclasses(nnx.Module):
            self._adopt(cls)

    def _adopt(self, cls: type) -> None:
        call = cls.__dict__.get("__call__")
        if (
            call is None
            or cls in self._originals
            or getattr(call, _MARK, False)
            or not callable(call)
        ):
            return
        self._originals[cls] = call
        type.__setattr__(cls, "__call__", self._wrap(call))

    def _hook_subclasses(self) -> None:
        """Wrap each ``nnx.Module`` class defined from now on, as it is defined."""
        module = flax_nnx().Module
        own = module.__dict__.get("__init_subclass__")
        scopes = self

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if own is not None:
                own.__get__(None, cls)(**kwargs)
            else:
                super(module, cls).__init_subclass__(**kwargs)  # the user's errors pass through
            if scopes._started:
                try:
                    scopes._adopt(cls)
                except Exception:  # without a name its ops still get Python frames
                    logger.debug(
                        "DeepContext could not name NNX class %s", cls.__name__, exc_info=True
                    )

        setattr(__init_subclass__, _MARK, True)
        type.__setattr__(module, "__init_subclass__", classmethod(__init_subclass__))
        self._hook = (module, own)

    def stop(self) -> None:
        originals, self._originals, self._started = self._originals, {}, False
        hook, self._hook = self._hook, None
        if hook is not None:
            module, own = hook
            try:
                if own is not None:
                    type.__setattr__(module, "__init_subclass__", own)
                elif (
                    getattr(module.__dict__.get("__init_subclass__"), "__func__", None) is not None
                ):
                    type.__delattr__(module, "__init_subclass__")
            except Exception:  # the hook stays, inert: _started is False
                logger.debug(
                    "DeepContext could not restore nnx.Module.__init_subclass__", exc_info=True
                )
        for cls, call in originals.items():
            try:
                type.__setattr__(cls, "__call__", call)
            except Exception:  # a class that forbids it keeps a pass-through wrapper
                logger.debug(
                    "DeepContext could not restore %s.__call__", cls.__name__, exc_info=True
                )

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
            except BaseException as exc:  # the user's, with the traceback it has without us
                cut_own_frames(exc)
                raise
            finally:
                scopes._local.stack.pop()

        setattr(__call__, _MARK, True)
        return __call__

    def _enter(self, module: Any, args: tuple, kwargs: dict) -> str | None:
        """The scope to push for this call (and push its entry), or None for no scope."""
        try:
            stack = self._local.__dict__.setdefault("stack", [])
            if stack and stack[-1].module is module:
                return None  # ``super().__call__``: already inside this module's scope
            if not stack:
                if not _tracing(args, kwargs):
                    return None
                root = type(module).__name__
                tree = {tuple(map(str, p)): m for p, m in flax_nnx().iter_modules(module)}
                self._record(root, root)
                # last, after all that can raise: the wrapper pops what was pushed
                stack.append(_Call(module, {id(m): p for p, m in tree.items()}, tree, (), root))
                return root  # wrapper pops what was pushed
            caller = stack[-1]
            paths, parent = caller.paths, caller.path
            path = paths.get(id(module))
            # a copy an NNX transform made: placed as its original, with its modules
            if path is None:
                path = _original_path(module, caller)
                if path is not None:
                    paths = {
                        **paths,
                        **{
                            id(m): path + tuple(map(str, p))
                            for p, m in flax_nnx().iter_modules(module)
                        },
                    }
            if path is None or path[: len(parent)] != parent or len(path) == len(parent):
                return None  # not below the calling module: its ops stay in the caller's scope
            self._record("/".join((caller.root, *path)), type(module).__name__)
            stack.append(_Call(module, paths, caller.tree, path, caller.root))
            return "/".join(path[len(parent) :])
        except Exception:  # naming must never break the model call
            logger.debug("DeepContext could not name an NNX module call", exc_info=True)
            return None

    def _record(self, path: str, cls: str) -> None:
        if path not in self.classes and len(self.classes) < _MAX_PATHS:
            self.classes[path] = cls


def _original_path(copy: Any, caller: _Call) -> tuple[str, ...] | None:
    """The path of the module ``copy`` was made from: a module of its class below
    ``caller``, the nearest first (the caller's own attribute before a module its
    submodules call), told apart by its variables' shapes (the copy's, or the
    copy's with one more axis: a scanned or vmapped stack) when several are as near."""
    parent = caller.path
    found = [
        p
        for p, m in caller.tree.items()
        if type(m) is type(copy) and len(p) > len(parent) and p[: len(parent)] == parent
    ]
    shapes = None
    for depth in sorted({len(p) for p in found}):
        nearest = [p for p in found if len(p) == depth]
        if len(nearest) > 1:
            shapes = _shapes(copy) if shapes is None else shapes
            nearest = [p for p in nearest if _stacked(_shapes(caller.tree[p]), shapes)]
        if nearest:
            return nearest[0] if len(nearest) == 1 else None
    return None


def _shapes(module: Any) -> list[tuple[int, ...]]:
    import jax

    return [
        tuple(getattr(leaf, "shape", ()))
        for leaf in jax.tree_util.tree_leaves(flax_nnx().state(module))
    ]


def _stacked(original: list[tuple[int, ...]], copy: list[tuple[int, ...]]) -> bool:
    """Whether each of ``copy``'s shapes is the original's, or the original's without one axis."""
    return len(original) == len(copy) and all(
        o == c or (len(o) == len(c) + 1 and any(o[:i] + o[i + 1 :] == c for i in range(len(o))))
        for o, c in zip(original, copy)
    )
