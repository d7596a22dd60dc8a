"""The plain-loop API: ``with dc_torch.profile(...) as prof: ... prof.step()``."""

from __future__ import annotations

from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.loop import StepLoop
from dc_torch.adapter import TorchAdapter


class Profiler(StepLoop):
    """Profiles a plain PyTorch training loop in step windows.

    Call ``start()`` before the first step, ``step()`` once at the end of every
    training step (the first step is step 0) and ``stop()`` after the loop; or
    use it as a context manager. Outside a window ``step()`` costs a compare.
    See `dc_core.record.loop.StepLoop` for the attributes.

    Args:
        config: What to profile; keyword ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both).
    """

    def __init__(self, config: ProfilerConfig | None = None, **overrides: Any) -> None:
        super().__init__(
            TorchAdapter(), config, framework="torch", default_phase="forward", **overrides
        )


def profile(config: ProfilerConfig | None = None, **overrides: Any) -> Profiler:
    """A `Profiler` to use as a context manager around a plain training loop."""
    return Profiler(config, **overrides)
