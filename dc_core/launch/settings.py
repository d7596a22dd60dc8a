"""What ``deepcontext run`` hands to the processes it starts, through the environment."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .process import CLAIMED_ENV, RUN_ENV

__all__ = ["CLAIMED_ENV", "RUN_ENV", "RunSettings"]


@dataclass(frozen=True)
class RunSettings:
    """One invocation of ``deepcontext run``.

    Args:
        logdir: Where profiles go (absolute).
        run: The run directory under ``logdir`` made for this invocation.
        step_function: ``module:qualname`` of a JAX step function, else None (detected).
        fallback_after_s: Seconds without any step boundary after which the
            process is profiled by a time range instead; 0 never falls back.
        time_window_s: Length of that time-range window.
    """

    logdir: str
    run: str
    step_function: str | None = None
    fallback_after_s: float = 60.0
    time_window_s: float = 10.0

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunSettings | None:
        """The settings of the run this process belongs to, or None outside ``deepcontext run``.

        Raises:
            ValueError: the variable is set but does not hold this version's settings.
        """
        raw = (os.environ if environ is None else environ).get(RUN_ENV)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{RUN_ENV} does not hold deepcontext run settings: {exc}") from None

    @property
    def log_dir(self) -> str:
        """Where each profiled process writes its log (the command prints it at the end)."""
        return os.path.join(self.logdir, self.run, ".logs")
