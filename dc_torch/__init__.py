"""DeepContext for PyTorch: one calling context tree from the user's line through
modules and operators (forward and backward) down to kernels.

Usage::

    with dc_torch.profile(logdir="runs/x", steps=StepRange(start=5, count=3)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

``torch.compile(model, backend="deepcontext")`` works once the package is
installed; ``compile_backend(inner=...)`` picks another inner backend.
torch is imported only when one of these is used.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dc_core.record.config import ProfilerConfig
    from dc_torch.loop import Profiler

__all__ = ["Profiler", "compile_backend", "is_available", "profile"]


def is_available() -> bool:
    """Whether PyTorch is importable here."""
    return importlib.util.find_spec("torch") is not None


def profile(config: ProfilerConfig | None = None, **overrides: Any) -> Profiler:
    """Context manager for plain loops; see `dc_torch.loop.Profiler` (``start``,
    ``step``, ``phase``, ``stop``, ``current_step``, ``written``)."""
    from dc_torch.loop import profile as make

    return make(config, **overrides)


def compile_backend(inner: Any = "inductor", **options: Any) -> Any:
    """A ``torch.compile`` backend that records compiled regions, wrapping ``inner``."""
    from dc_torch.compiled import compile_backend as make

    return make(inner, **options)


def __getattr__(name: str) -> Any:
    if name == "Profiler":
        from dc_torch.loop import Profiler

        return Profiler
    raise AttributeError(f"module 'dc_torch' has no attribute {name!r}")
