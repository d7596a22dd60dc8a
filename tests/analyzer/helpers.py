"""Small builders for analyzer tests: a profile around a literal tree."""

from __future__ import annotations

import dataclasses

from dc_core.model.tree import tree_from_lists
from dc_core.store.profile import Profile, Series

MS = 1_000_000
US = 1_000


def profile(*specs, steps=(5, 8), step_times=None, system=(), uniform=True, **fields) -> Profile:
    """A profile of ``tree_from_lists(*specs)``; step times default to the tree's
    host time split evenly over the steps. ``uniform``: every step's host time
    is the same (the step bounds say so); False: no step bounds, as an older
    writer's file."""
    tree = tree_from_lists(*specs)
    n = steps[1] - steps[0]
    if step_times is None:
        step_times = [tree.total("cpu_time_ns") // n] * n
    if uniform and "cpu_time_ns" in tree.excl and "step_bounds" not in fields:
        even = [v // n for v in tree.excl["cpu_time_ns"]]
        fields["step_bounds"] = {"cpu_time_ns.min": even, "cpu_time_ns.max": list(even)}
    return Profile(
        tree=tree, steps=steps, step_times_ns=list(step_times), system=list(system), **fields
    )


def series(name: str, values, device: int = -1, interval_ns: int = 100 * MS) -> Series:
    return Series(
        name, device, [i * interval_ns for i in range(len(values))], [float(v) for v in values]
    )


def rules(findings) -> list[str]:
    return [f["rule"] for f in findings]


def only(findings, rule: str) -> dict:
    found = [f for f in findings if f["rule"] == rule]
    assert len(found) == 1, f"expected one {rule} finding, got {found}"
    return found[0]


def line(func: str, where: str) -> str:
    """A python frame label for the shorthand: ``line("rmsnorm", "model.py:12")``."""
    return f"python:{func}|{where}"


def analysed(profile: Profile) -> Profile:
    """``profile`` with its findings (`analyzer.findings_of`), as ``deepcontext
    analyze`` stores them; the read profile itself is left as it was read."""
    from dc_core.analyzer import findings_of

    return dataclasses.replace(
        profile, findings=findings_of(profile), analysis_pending=False, analyzer_overrides={}
    )


def with_classes(p: Profile, classes: dict[str, str]) -> Profile:
    """``p`` with its module frames named in ``classes`` given their class
    (``{"blocks.0": "Block"}``): the shorthand names modules, not classes."""
    from dc_core.model.tree import Frame

    tree = p.tree
    tree.frames = [
        Frame(f.kind, f.name, f.file, f.line, classes[f.name], f.backward)
        if f.kind == "module" and f.name in classes
        else f
        for f in tree.frames
    ]
    tree._frame_ids = None  # the frames' lookup, rebuilt on the next one
    return p
