"""The plain-loop API: ``with dc_torch.profile(...) as prof: ... prof.step()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.session import Session

from dc_torch.adapter import TorchAdapter


class Profiler:
    """Profiles a plain PyTorch training loop in step windows.

    Call ``start()`` before the first step, ``step()`` once at the end of every
    training step (the first step is step 0) and ``stop()`` after the loop; or
    use it as a context manager. Outside a window ``step()`` costs a compare.

    Args:
        config: What to profile; keyword ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both).
    """

    def __init__(self, config: ProfilerConfig | None = None, **overrides: Any) -> None:
        self.session = Session(config, framework="torch", adapter=TorchAdapter(), default_phase="forward", **overrides)
        self.step_num = 0
        self._started = False

    def start(self) -> "Profiler":
        if not self._started:
            self._started = True
            self.session.step_begin(self.step_num)
        return self

    def step(self) -> None:
        """Mark the end of the current training step and the start of the next."""
        done = self.step_num
        self.step_num = done + 1
        session = self.session
        session.step_end(done)
        session.step_begin(done + 1)

    def stop(self) -> None:
        """Close the session; an open window is written with the steps it saw."""
        self.session.close()

    @property
    def written(self) -> list[Path]:
        """Profile files written so far."""
        return list(self.session.written)

    def __enter__(self) -> "Profiler":
        try:
            return self.start()
        except BaseException:  # e.g. Ctrl-C while starting: no ``__exit__`` will come to unhook
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False  # the user's exception propagates unchanged


def profile(config: ProfilerConfig | None = None, **overrides: Any) -> Profiler:
    """A `Profiler` to use as a context manager around a plain training loop."""
    return Profiler(config, **overrides)
