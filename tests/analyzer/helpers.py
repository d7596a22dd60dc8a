"""Small builders for analyzer tests: a profile around a literal tree."""

from __future__ import annotations

from dc_core.store.profile import Profile, Series
from dc_core.model.tree import tree_from_lists

MS = 1_000_000
US = 1_000


def profile(*specs, steps=(5, 8), step_times=None, system=(), **fields) -> Profile:
    """A profile of ``tree_from_lists(*specs)``; step times default to the tree's
    host time split evenly over the steps."""
    tree = tree_from_lists(*specs)
    if step_times is None:
        n = steps[1] - steps[0]
        step_times = [tree.total("cpu_time_ns") // n] * n
    return Profile(tree=tree, steps=steps, step_times_ns=list(step_times), system=list(system), **fields)


def series(name: str, values, device: int = -1, interval_ns: int = 100 * MS) -> Series:
    return Series(name, device, [i * interval_ns for i in range(len(values))], [float(v) for v in values])


def rules(findings) -> list[str]:
    return [f["rule"] for f in findings]


def only(findings, rule: str) -> dict:
    found = [f for f in findings if f["rule"] == rule]
    assert len(found) == 1, f"expected one {rule} finding, got {found}"
    return found[0]


def line(func: str, where: str) -> str:
    """A python frame label for the shorthand: ``line("rmsnorm", "model.py:12")``."""
    return f"python:{func}|{where}"
