"""Exporters: a profile (or tree) in, bytes other tools read out. One module each.

| format | module | reads it |
| --- | --- | --- |
| ``chrome`` | `chrome` | chrome://tracing, Perfetto UI (the tree as a flame chart) |
| ``speedscope`` | `speedscope` | speedscope.app |
| ``pprof`` | `pprof` | ``go tool pprof``, pprof-compatible viewers |
| ``hatchet`` | `hatchet` | LLNL Hatchet ``GraphFrame.from_literal`` |
| ``thicket`` | `thicket` | LLNL Thicket (every rank of a window; `thicket.load`) |

The Chrome and speedscope flame charts share one layout (`layout`); the
Hatchet literal and the report's JSON share one non-recursive writer (`nested`);
the Thicket file holds one Hatchet literal per rank. Each exporter draws, or
opens on, the metric it is given.

Every format exports one profile (`exporter`). The `PER_WINDOW` ones are
meant for all ranks of a window together (`window_exporter`), which is how
the CLI writes them: one file per run and window instead of one per profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..store.profile import Profile

FORMATS = ("chrome", "speedscope", "pprof", "hatchet", "thicket")
SUFFIX = {
    "chrome": ".trace.json",
    "speedscope": ".speedscope.json",
    "pprof": ".pb.gz",
    "hatchet": ".hatchet.json",
    "thicket": ".thicket.json",
}
#: Formats whose file holds every rank of one (run, window).
PER_WINDOW = ("thicket",)


def _module(name: str):
    if name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}")
    return __import__(f"{__name__}.{name}", fromlist=["export"])


def exporter(name: str) -> Callable[[Profile, str], bytes]:
    """The ``export(profile, metric) -> bytes`` function of format ``name``."""
    return _module(name).export


def window_exporter(name: str) -> Callable[[Sequence[Profile], str], bytes]:
    """The ``export_window(profiles, metric) -> bytes`` function of a `PER_WINDOW` format:
    the profiles are the ranks of one run's window."""
    if name not in PER_WINDOW:
        raise ValueError(
            f"format {name!r} exports one profile per file, not a window's ranks "
            f"(those that do: {', '.join(PER_WINDOW)})"
        )
    return _module(name).export_window
