"""JAX steps for ``deepcontext run``: one step is one call of the jitted train step.

Installed when ``jax`` is imported (and again when ``flax.nnx`` is), this
replaces ``jax.jit``, ``jax.pmap`` and ``nnx.jit`` with functions that make the jitted
function as always and hand the script a thin `Jitted` proxy of it: calls,
attributes (``lower``, ``trace``, ``eval_shape``...) and method binding go
to the real one, arguments untouched, so donation and static arguments work
as before.

Which jitted function is the step: the one ``--step-function module:qualname``
names, from its first call; otherwise the first whose calls from one line of
the script's own files reach `CALLS` (an eval function called from another
line, or a jitted helper called by a library, does not count), from that
call. Calls made while JAX traces (a jitted helper inside the train step)
are not counted: they are not executions. Steps are numbered from the
identifying call (step 0) and each ends when a call of the step function
returns.

Once the step is found, or another driver claimed the steps, ``jax.jit``,
``jax.pmap`` and ``nnx.jit`` are put back and every proxy but the step's calls straight
through: one attribute load per call. Until then a call reads its caller's
frame and counts. Flax NNX modules are named only while a step is traced
(see ``nnx_hooks``), which happens at its first call, before it is known to
be the step: so while searching, NNX module calls are named from the first
call of each jitted function, and the names go to the profiler found.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from dc_core.collect.ownfiles import cut_own_frames
from dc_jax.names import qualified_name, unwrapped

logger = logging.getLogger("deepcontext")

#: Calls from one line of the script that make a jitted function the step.
CALLS = 3
_MAX_COUNTED = 10_000  # (function, line) pairs counted at most: bounded memory
_COPIED = ("__module__", "__name__", "__qualname__", "__doc__", "__wrapped__")


class Jitted:
    """A jitted function as the script sees it: the real one, observed.

    Args:
        jitted: What ``jax.jit``/``nnx.jit`` returned.
        kind: Which of them (``"jax.jit"``), for the report.

    Attributes:
        _dc_call: What a call runs: ``jitted`` itself unless it is watched or the step.
    """

    def __init__(self, jitted: Any, kind: str) -> None:
        self._dc_jitted = jitted
        self._dc_kind = kind
        self._dc_call: Callable[..., Any] = jitted
        for name in _COPIED:  # what functools.wraps and jax copied from the function
            try:
                setattr(self, name, getattr(jitted, name))
            except AttributeError:
                pass

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:  # ``self=`` may be the user's keyword
        try:
            return self._dc_call(*args, **kwargs)
        except BaseException as exc:  # the user's, with the traceback it has without us
            cut_own_frames(exc)
            raise

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # A jitted method binds as jax's own does: the instance becomes the first argument.
        return self if obj is None else types.MethodType(self, obj)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_dc_"):  # not set yet (a copy being made): never recurse
            raise AttributeError(name)
        return getattr(self._dc_jitted, name)

    def __repr__(self) -> str:
        return repr(self._dc_jitted)


class JitSteps:
    """Finds the step among the jitted functions and drives a `dc_jax.loop.Profiler` from its calls.

    Args:
        launch: The process's `dc_core.launch.child.Launch`.
    """

    def __init__(self, launch: Any) -> None:
        self.launch = launch
        self.named = _parse(launch.settings.step_function)
        self.loop: Any = None  # the Profiler, once the step is found
        self.step: Jitted | None = None
        self.scopes: Any = None  # NNX module naming started while searching
        self._watched: weakref.WeakSet | None = weakref.WeakSet()  # None: settled, nothing watched
        self._seen: weakref.WeakSet = weakref.WeakSet()  # proxies called once (traced) already
        self._counts: dict[tuple[Jitted, str, int], int] = {}
        self._own: dict[str, bool] = {}
        self._patches: list[tuple[Any, str, Any, Any]] = []
        self._lock = threading.Lock()
        self._top_level = _top_level_check()

    @property
    def searching(self) -> bool:
        """Whether the step is still to be found (and this process's to find)."""
        return self._watched is not None and self.launch.source is None

    # --- jax.jit and nnx.jit ----------------------------------------------------------
    def patch(self, module: Any, kind: str, attribute: str = "jit") -> None:
        """Make ``module.<attribute>`` (``jax.jit``) hand out proxies; ``kind``
        (``"jax.jit"``) names it in the report."""
        original = getattr(module, attribute)

        @functools.wraps(original)
        def jit(*args: Any, **kwargs: Any) -> Any:
            made = original(*args, **kwargs)  # the user's errors are raised here, unchanged
            if args or "fun" in kwargs:
                return self.wrap(made, kind)
            # ``@jax.jit(donate_argnums=0)``: a decorator, whose result is the jitted function
            return lambda fun: self.wrap(made(fun), kind)

        jit._deepcontext_steps = self  # type: ignore[attr-defined]  # install_nnx finds it here
        setattr(module, attribute, jit)
        self._patches.append((module, attribute, original, jit))

    def wrap(self, jitted: Any, kind: str) -> Any:
        """The proxy the script gets for ``jitted``; ``jitted`` itself if that fails."""
        try:
            proxy = Jitted(jitted, kind)
            with self._lock:
                if self._watched is not None:
                    proxy._dc_call = functools.partial(self._watch, proxy)
                    self._watched.add(proxy)
            return proxy
        except Exception as exc:
            self._fail(exc)
            return jitted

    # --- searching ------------------------------------------------------------------
    def _watch(self, proxy: Jitted, /, *args: Any, **kwargs: Any) -> Any:
        """A call while the step is not known: the user's call, once, plus counting."""
        try:
            # 0: here, 1: Jitted.__call__, 2: the caller
            begins = self._observe(proxy, sys._getframe(2))
        except Exception as exc:
            self._fail(exc)
            begins = False
        if begins:
            return proxy._dc_call(*args, **kwargs)  # now the step's call
        return proxy._dc_jitted(*args, **kwargs)

    def _observe(self, proxy: Jitted, frame: Any) -> bool:
        """Whether this call of ``proxy`` (from ``frame``) is step 0."""
        if self.launch.source is not None:  # another driver has the steps
            self._settle(None)
            return False
        if not self._top_level():  # traced inside another function: not an execution
            return False
        if self.named is not None:
            if not self._is_named(proxy):
                return False
            return self._begin(
                proxy,
                f"each call of {_name(proxy)}, named by --step-function "
                f"{':'.join(self.named)} (first called at {_where(frame)}); step 0 is call 1",
            )
        filename = frame.f_code.co_filename
        own = self._own.get(filename)
        if own is None:
            own = self._own[filename] = self.launch.own_file(filename)
        if not own:
            return False
        if proxy not in self._seen:  # its first call traces it: name NNX modules from here
            self._seen.add(proxy)
            self._name_nnx()
        key = (proxy, filename, frame.f_lineno)
        calls = self._counts.get(key, 0) + 1
        if calls < CALLS:
            if len(self._counts) >= _MAX_COUNTED:
                self._counts.clear()
            self._counts[key] = calls
            return False
        return self._begin(
            proxy,
            f"each call of {_name(proxy)}, called repeatedly at {_where(frame)}; "
            f"step 0 is call {CALLS}",
        )

    def _is_named(self, proxy: Jitted) -> bool:
        """Whether ``proxy`` is the function ``--step-function`` names: by the
        function's own module and qualname, or as the attribute it names."""
        module, qualname = self.named
        modules = _module_names(module)
        function = unwrapped(proxy._dc_jitted)
        if (
            getattr(function, "__qualname__", None) == qualname
            and getattr(function, "__module__", None) in modules
        ):
            return True
        target: Any = sys.modules.get("__main__" if "__main__" in modules else module)
        for part in qualname.split("."):
            target = getattr(target, part, None)
        return target is proxy or getattr(target, "__func__", None) is proxy

    def _name_nnx(self) -> None:
        """Name the NNX module calls of the trace about to run (see the module's docstring)."""
        from dc_jax.nnx_hooks import NnxScopes, flax_nnx

        if flax_nnx() is None:
            return
        if self.scopes is None:
            self.scopes = NnxScopes()
            self.scopes.start()
        else:
            self.scopes.refresh()  # classes defined since

    def _begin(self, proxy: Jitted, source: str) -> bool:
        """``proxy`` is the step function: claim the steps and start profiling."""
        from dc_jax.adapter import JaxAdapter
        from dc_jax.loop import Profiler

        with self._lock:
            if self._watched is None:
                return False
            if not self.launch.claim(source):
                self._settle_locked(None)
                return False
            # The names found while searching serve the profiler (the adapter's
            # own would start only now, after the step was traced).
            adapter, self.scopes = JaxAdapter(nnx=self.scopes), None
            self.loop = loop = Profiler(None, adapter=adapter, **self.launch.overrides)
            self.launch.adopt(loop.session, self.close)
            self._settle_locked(proxy)
        loop.start()
        return True

    # --- found (or not ours) ----------------------------------------------------------
    def _settle(self, step: Jitted | None) -> None:
        with self._lock:
            self._settle_locked(step)

    def _settle_locked(self, step: Jitted | None) -> None:
        """Stop searching: every proxy calls straight through, ``step`` ends a step
        at each call; ``jax.jit``, ``jax.pmap`` and ``nnx.jit`` are put back."""
        watched, self._watched = self._watched, None
        if watched is None:
            return
        for proxy in list(watched):
            proxy._dc_call = proxy._dc_jitted
        self._counts.clear()
        self._restore()
        if self.scopes is not None:  # nobody will read the names
            self.scopes.stop()
            self.scopes = None
        if step is not None:
            self.step = step
            step._dc_call = self._stepping(step._dc_jitted)

    def _stepping(self, jitted: Any) -> Callable[..., Any]:
        loop, top_level = self.loop, self._top_level

        def call(*args: Any, **kwargs: Any) -> Any:
            out = jitted(*args, **kwargs)  # the user's exceptions pass through, and end no step
            try:
                if top_level():
                    loop.step(out)  # what it returned holds the new train state
            except Exception as exc:
                self._fail(exc)
            return out

        return call

    def close(self) -> None:
        """Write the open window (the process ends); later calls end no step."""
        if self.step is not None:
            self.step._dc_call = self.step._dc_jitted
        if self.loop is not None:
            self.loop.stop()

    def _restore(self) -> None:
        for module, name, original, ours in self._patches:
            if getattr(module, name, None) is ours:  # not if someone patched it after us
                setattr(module, name, original)
        self._patches = []

    def _fail(self, exc: BaseException) -> None:
        """Our own error: log it once, let every call through, write what was collected."""
        first = self._watched is not None or self.step is not None
        try:
            self._settle(None)
            self.close()
            self.step = None
        except Exception:
            logger.debug("DeepContext: cleaning up after a failure failed", exc_info=True)
        if first:
            logger.warning(
                "DeepContext could not follow the jitted steps (%r); the rest of this process "
                "runs unprofiled",
                exc,
            )


def _name(proxy: Jitted) -> str:
    """``jax.jit train_step``: the kind and the qualified name of the function
    behind the wrappers (``nnx.jit(partial(train_step, ...))`` included)."""
    return f"{proxy._dc_kind} {qualified_name(proxy._dc_jitted) or repr(proxy)}"


def _where(frame: Any) -> str:
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"


def _parse(spec: str | None) -> tuple[str, str] | None:
    if not spec:
        return None
    module, _, qualname = spec.partition(":")
    return module, qualname


def _module_names(module: str) -> set[str]:
    """The names a function of ``module`` may carry: run as the script, the
    main module's ``__module__`` is ``__main__`` (``train:step`` names it by
    its file's stem, ``pkg.train:step`` by ``-m pkg.train``)."""
    main = sys.modules.get("__main__")
    aliases = {"__main__"}
    file = getattr(main, "__file__", None)
    if file:
        aliases.add(file.rsplit("/", 1)[-1].rsplit(".", 1)[0])
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        aliases.add(spec.name)
    return {module, "__main__"} if module in aliases else {module}


def _top_level_check() -> Callable[[], bool]:
    """A function telling whether JAX traces nothing now: a call then is an execution,
    not a part of another function's trace."""
    try:
        from jax._src import core

        return core.trace_ctx.is_top_level
    except Exception:  # a JAX without it: every call counts
        logger.debug("DeepContext: JAX's trace state is not readable", exc_info=True)
        return lambda: True


def install(launch: Any, jax: Any) -> None:
    """``jax`` was imported in a process of ``deepcontext run``: watch its jitted functions."""
    steps = JitSteps(launch)
    if steps.searching:
        steps.patch(jax, "jax.jit")
        steps.patch(jax, "jax.pmap", "pmap")  # a pmapped step is one call too


def install_nnx(launch: Any, nnx: Any) -> None:
    """``flax.nnx`` was imported: watch ``nnx.jit`` functions too, with the same search."""
    jax = sys.modules.get("jax")
    steps = getattr(getattr(jax, "jit", None), "_deepcontext_steps", None)
    if steps is None:  # jax.jit was not patched: search among nnx.jit functions alone
        steps = JitSteps(launch)
    if steps.searching:
        steps.patch(nnx, "nnx.jit")
