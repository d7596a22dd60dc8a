"""DeepContext for JAX and Flax: from the user's line and Flax module to XLA ops and kernels.

Importing this package does not import jax; profiling does.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["Profiler", "is_available", "profile"]


def is_available() -> bool:
    """Whether jax (and jaxlib) are installed; checked without importing them."""
    return (
        importlib.util.find_spec("jax") is not None
        and importlib.util.find_spec("jaxlib") is not None
    )


def __getattr__(name: str) -> Any:
    if name in ("Profiler", "profile"):
        from dc_jax import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'dc_jax' has no attribute {name!r}")
