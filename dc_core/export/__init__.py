"""Exporters: a profile (or tree) in, bytes other tools read out. One module each.

| format | module | reads it |
| --- | --- | --- |
| ``chrome`` | `chrome` | chrome://tracing, Perfetto UI (the tree as a flame chart) |
| ``speedscope`` | `speedscope` | speedscope.app |
| ``pprof`` | `pprof` | ``go tool pprof``, pprof-compatible viewers |
| ``hatchet`` | `hatchet` | LLNL Hatchet ``GraphFrame.from_literal`` |

The Chrome and speedscope flame charts share one layout (`layout`); the
Hatchet literal and the report's JSON share one non-recursive writer (`nested`).
Each exporter draws, or opens on, the metric it is given.
"""

from __future__ import annotations

from typing import Callable

from ..store.profile import Profile

FORMATS = ("chrome", "speedscope", "pprof", "hatchet")
SUFFIX = {"chrome": ".trace.json", "speedscope": ".speedscope.json", "pprof": ".pb.gz", "hatchet": ".hatchet.json"}


def exporter(name: str) -> Callable[[Profile, str], bytes]:
    """The ``export(profile, metric) -> bytes`` function of format ``name``."""
    if name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}")
    module = __import__(f"{__name__}.{name}", fromlist=["export"])
    return module.export
