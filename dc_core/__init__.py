"""DeepContext core, one folder per stage of the data flow:

- ``record/``: config and step windows, the session every integration drives,
  collector snapshot → profile;
- ``collect/``: the collector facade, the pure-Python reference collector, the
  sampler/monitor thread, symbol names;
- ``model/``: the vocabulary (kinds, metrics), the tree, processors and views;
- ``store/``: the profile format and the logdir layout;
- ``analyzer/``, ``export/``, ``cli/``, ``tensorboard/``: what reads profiles.

Importing it never imports torch or jax.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .record.config import ProfilerConfig, StepRange, TimeRange

__version__ = "0.1.0"

__all__ = ["ProfilerConfig", "StepRange", "TimeRange", "__version__"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: every process ``deepcontext run`` starts imports this
    # package to decide whether to profile itself, most of them to say no.
    if name in ("ProfilerConfig", "StepRange", "TimeRange"):
        from .record import config

        return getattr(config, name)
    raise AttributeError(f"module 'dc_core' has no attribute {name!r}")
