"""``dc_core.config`` as earlier releases spelled it; the module is `dc_core.record.config`."""

from .record.config import ProfilerConfig, StepRange, TimeRange, resolve

__all__ = ["ProfilerConfig", "StepRange", "TimeRange", "resolve"]
