"""What a framework adapter gives the core.

`Adapter` is what a session (``dc_core.record.session.Session``) drives: the
hooks a window installs and removes, and what it adds to the profile. It is a
base class whose methods do nothing, so a session calls each of them on any
adapter and a framework's adapter overrides only what it has; a session
without a framework gets the base class itself.

`AdapterPackage` is what an installed adapter package says of itself, under
the ``deepcontext.adapters`` entry points (pyproject.toml): its package, the
step drivers of ``deepcontext run``, its plain loop, its demo workload. The
core finds adapters there (`adapter_packages`) and names none of them.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session import Session

#: The entry-point group adapter packages register an `AdapterPackage` under.
ENTRY_POINTS = "deepcontext.adapters"

logger = logging.getLogger("deepcontext")


class Adapter:
    """The hooks of one framework, driven by a session; every method does nothing here.

    The session calls them in this order: `prepare` once when it is made;
    per window `install` as it opens, `step_overhead_ns` at each step's end,
    `uninstall` as it closes, then `environment` and `step_bound_shifts`
    while its profile is made; `restore` at later step boundaries while an
    `uninstall` said a hook is still in. An error raised by any of them is
    the profiler's (the session's failure policy: logged once, profiling off).
    """

    #: Name recorded in profiles ("torch", "jax").
    framework: str = "python"

    def prepare(self, session: Session) -> None:
        """At session creation: pay one-off costs (building an extension,
        warming tables) now rather than in the first profiled step. A failure
        is only logged at debug level: `install` tries again."""

    def install(self, session: Session) -> None:
        """A window opens: put the hooks in (undoing what it did if it fails).

        Raises:
            WindowSkipped: the window cannot be recorded for a reason outside
                the profiler; the session skips it with one warning.
        """

    def uninstall(self, session: Session) -> bool | None:
        """The window closes: take the hooks out and ingest what they gathered
        (device activity, traces). False while a hook could not be removed yet
        (`restore` is asked later); True or None when all are out."""
        return True

    def restore(self) -> bool:
        """Take out what `uninstall` could not; True when nothing is left."""
        return True

    def environment(self) -> dict[str, str]:
        """Facts for the profile's environment (versions, devices, the capture path)."""
        return {}

    def step_overhead_ns(self) -> int:
        """Nanoseconds of the step just ended that were the framework's one-offs
        (a compile): reported apart, not as step time."""
        return 0

    def memory_state(self) -> tuple[bool, str]:
        """Whether the window just closed tracked memory (``collector.memory_snapshot()``
        then holds it), and what about it the profile should say (why not, or
        what is missing); asked only when the config wants memory."""
        return False, f"the {self.framework} adapter does not collect memory"

    def memory_readout(self, collector: Any) -> Mapping[str, Any]:
        """The window's memory, in ``Collector.memory_snapshot()``'s shape (per-node
        columns by the collector's node ids, and optionally ``"missing"``: the
        memory metrics this framework cannot give); asked when `memory_state`
        says it was collected. An adapter whose framework reports memory otherwise (JAX's
        device memory profile) builds it here."""
        return collector.memory_snapshot()

    def step_bound_shifts(self) -> Mapping[int, tuple[int, int]]:
        """``cpu_time_ns`` that `uninstall` moved between nodes after the steps
        were marked: per node, the least and greatest change over the window's steps."""
        return {}


class WindowSkipped(Exception):
    """Raised by an adapter's ``install`` when a window cannot be recorded for a
    reason outside the profiler (the user's own ``jax.profiler`` trace is
    running): the window is skipped with one warning, nothing is written for
    it, and later windows are tried as scheduled."""


@dataclass(frozen=True)
class Demo:
    """An adapter's workload for ``deepcontext demo``.

    Attributes:
        run: ``"module:function"``; ``function(logdir, run=name)`` trains
            and returns the profiles it wrote.
        needs: Modules it imports, each a tuple of alternatives
            (``("lightning", "pytorch_lightning")``).
        extra: The package extra that installs them.
        label: How the command's help names it (default: the adapter's name).
    """

    run: str
    needs: tuple[tuple[str, ...], ...]
    extra: str
    label: str = ""


@dataclass(frozen=True)
class AdapterPackage:
    """What an installed adapter package tells the core (its entry point's object).

    Attributes:
        name: Short name (``"torch"``): the demo workload's, in messages.
        package: Its top-level package; its files are the profiler's own.
        order: Where several apply (the demo ``auto`` picks, the loop a time
            range takes), lower comes first: the richest context first.
        drivers: ``deepcontext run``'s step drivers: a module whose import
            starts one -> ``"module:function"``, called with the run's
            ``Launch`` and the imported module.
        time_loop: ``(framework module, "module:Class")``: the plain loop a
            time range profiles with once that framework is imported;
            ``Class(None, **overrides)`` is a `dc_core.record.loop.StepLoop`.
        demo: Its ``deepcontext demo`` workload, if it has one.
    """

    name: str
    package: str
    order: int = 100
    drivers: Mapping[str, str] = field(default_factory=dict)
    time_loop: tuple[str, str] | None = None
    demo: Demo | None = None


@functools.cache  # installed packages do not change while the process runs
def adapter_packages() -> tuple[AdapterPackage, ...]:
    """The installed adapter packages, by `AdapterPackage.order`. One that
    fails to load is left out with one warning (the others still work)."""
    from importlib.metadata import entry_points

    found = []
    for point in entry_points(group=ENTRY_POINTS):
        try:
            package = point.load()
        except Exception as exc:  # a broken install of one adapter breaks no other
            logger.warning(
                "DeepContext skips the adapter %s (%s): %r", point.name, point.value, exc
            )
            continue
        if not isinstance(package, AdapterPackage):
            logger.warning(
                "DeepContext skips the adapter %s: %s is not an AdapterPackage",
                point.name,
                point.value,
            )
            continue
        found.append(package)
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def load(target: str) -> Any:
    """The object a ``"module:name"`` of an `AdapterPackage` names (importing its module)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
