"""The collector facade: the native collector when it is built, else the reference one.

Both implement ``dc_core/_native.pyi``. Integrations and the session get their
collector from ``create_collector`` and never import either implementation.
Frame kind names are the vocabulary's (``dc_core.model.kinds.KINDS``, indexed
by the ``KIND_*`` numbers re-exported here).
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Any

from dc_core.collect import reference

# Re-exported: the contract's constants (identical in both implementations,
# checked by tests/collect/test_contract_constants.py), so callers need not know
# which collector they hold.
from dc_core.collect.reference import (  # noqa: F401 (re-exported)
    FLAG_BACKWARD,
    KIND_COMPILED,
    KIND_KERNEL,
    KIND_MODULE,
    KIND_NATIVE,
    KIND_OPERATOR,
    KIND_PHASE,
    KIND_PYTHON,
    KIND_ROOT,
    KIND_SHARDING,
    METRIC_COUNT,
    METRIC_CPU_TIME,
    METRIC_SAMPLES,
    now_ns,
)

# The contract's sentinels for ``Collector.enter`` (``dc_core/_native.pyi``),
# by name: ``enter(frames, INNERMOST, False, INHERIT)`` reads, ``-1, False, -2``
# does not. Checked against the stub's defaults and both implementations'
# behaviour by tests/collect/test_contract_constants.py.

#: Node id of the tree's root: ``enter(parent=ROOT_NODE)`` opens a scope right under it.
ROOT_NODE = 0
#: ``enter(parent=INNERMOST)``: the scope opens under this thread's innermost
#: open scope (the contract's default).
INNERMOST = -1
#: ``enter(user_depth=MEASURE)``: the scope's user depth is measured from the
#: current stack (the contract's default).
MEASURE = -1
#: ``enter(user_depth=INHERIT)``: the scope takes the innermost open scope's
#: user depth without walking the stack, for scopes that add no Python frames
#: of their own (``kInheritUserDepth`` in ``native/python_scopes.h``).
INHERIT = -2
#: ``enter(user_depth=WHOLE_STACK)``: captures under the scope keep the whole
#: Python stack from its outermost frame (a phase, a step).
WHOLE_STACK = 0

logger = logging.getLogger("deepcontext")


@functools.cache
def _native_module() -> tuple[ModuleType | None, str]:
    """The extension module, or ``None`` and why it did not import (tried once)."""
    try:
        from dc_core import _native
    except ImportError as error:
        return None, f"{type(error).__name__}: {error}"
    return _native, ""


@functools.cache
def _warn_fallback(reason: str) -> None:
    # Cached so that a job creating a collector per window warns once, not per window.
    logger.warning(
        "native collector unavailable (%s); using the pure-Python reference collector", reason
    )


def native_available() -> bool:
    """Whether ``dc_core._native`` (the C++ collector) imports."""
    return _native_module()[0] is not None


def create_collector(prefer_native: bool = True, **kwargs: Any) -> Any:
    """A new collector with the ``dc_core/_native.pyi`` interface.

    Args:
        prefer_native: use the C++ collector when it imports (the default);
            ``False`` always gives the pure-Python reference collector.
        **kwargs: passed to the constructor (``max_nodes``, ``max_samples``).

    Returns:
        A ``dc_core._native.Collector`` if ``prefer_native`` and the extension
        imports, else a ``dc_core.collect.reference.Collector`` (after one warning
        through ``logging`` when the native one was wanted but unavailable).
    """
    if prefer_native:
        native, reason = _native_module()
        if native is not None:
            return native.Collector(**kwargs)
        _warn_fallback(reason)
    return reference.Collector(**kwargs)
