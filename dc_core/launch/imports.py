"""Run a function right after a module is imported, wherever it is imported from.

``deepcontext run`` patches a few framework entry points (``Trainer.__init__``,
``jax.jit``) in a script it did not write: the patch must land after the
framework's module has executed and before the script uses it. A finder at
the front of ``sys.meta_path`` answers only for the watched names: it asks the
other finders for the real spec and wraps its loader, so the module loads as
it always does and the callback runs once its body has executed. Every other
import costs one set lookup.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger("deepcontext")

Callback = Callable[[Any], None]


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callbacks[name](module)`` once ``name`` has been imported.

    A callback that raises is logged once and forgotten: the import itself
    always succeeds as it would have. Names already imported are handled at
    ``install``.
    """

    def __init__(self, callbacks: dict[str, Callback]) -> None:
        self.callbacks = dict(callbacks)
        self._loading: set[str] = set()

    def install(self) -> None:
        """Put the finder first on ``sys.meta_path``; run callbacks of modules already loaded."""
        for name in [n for n in self.callbacks if n in sys.modules]:
            self._run(name, sys.modules[name])
        if self.callbacks and self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Take the finder off ``sys.meta_path`` (callbacks not run yet are dropped)."""
        self.callbacks.clear()
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if name not in self.callbacks or name in self._loading:
            return None
        self._loading.add(name)  # the other finders are asked below; they must not find us again
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._loading.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self, name)
        return spec

    def _run(self, name: str, module: Any) -> None:
        callback = self.callbacks.pop(name, None)
        if not self.callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)
        if callback is None:
            return
        try:
            callback(module)
        except Exception as exc:  # a patch that fails leaves the framework as it was
            logger.warning(
                "DeepContext could not hook %s (%r); that part of the run is not profiled",
                name,
                exc,
            )


class _Loader(importlib.abc.Loader):
    """The real loader, then the callback."""

    def __init__(self, loader: Any, finder: AfterImport, name: str) -> None:
        self.loader, self.finder, self.name = loader, finder, name

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # The module's spec must name the real loader (reload, pkgutil, resources read it).
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.finder._run(self.name, module)

    def __getattr__(self, attr: str) -> Any:  # get_resource_reader, is_package, get_code, …
        return getattr(self.loader, attr)
