"""The analyzer: rules that turn a profile into findings with concrete suggestions.

A rule is a small pure function ``rule(window) -> list[finding]``; a finding is
``{rule, severity, message, suggestion, path, evidence, node}`` where ``path``
is the labels of the node's call path (root's child first) and ``node`` its
index in the profile's tree (-1 when the finding is about the whole window),
plus ``gain_ns``, the time per step its fix would save (None: not
estimable), and ``gain_basis``, the sentence saying which time that is. A
memory finding saves bytes at the memory peak instead: ``evidence["gain_bytes"]``
(`base.saved_bytes`), said in its message and basis.
Timing rules weigh each node's quietest step (`base.Window.quiet`), so one
step the machine stole cannot make a finding.
Rule ids and default thresholds are named in `dc_core.model.rules` (a config's
overrides are checked against them without importing the analyzer);
``ProfilerConfig.analyzer`` overrides the thresholds. ``analyze`` sees one
window of one rank; ``analyze_ranks`` compares the windows and ranks of a run;
`stream.analyze_files` does both over a logdir's files with one profile in
memory at a time (what ``deepcontext analyze`` runs).

A profiling session does not analyse on the training thread: it writes each
window marked pending (`store.profile.mark_pending`, with its threshold
overrides), and `findings_of` analyses such a profile where it is read (the
report, its JSON, the tab).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model.kinds import SEVERITIES
from ..model.rules import RULE_IDS
from ..store.profile import Profile
from . import (
    communication,
    context,
    growth,
    memory,
    operators,
    phases,
    ranks,
    steps,
    system,
    trends,
)
from .base import Window, saved_bytes
from .thresholds import DEFAULTS, Thresholds

logger = logging.getLogger("deepcontext")

#: Single-window rules, in report order within a severity (ids and order:
#: `dc_core.model.rules.RULE_IDS`, which a test holds to these two tables).
RULES: dict[str, Callable[[Window], list[dict[str, Any]]]] = {
    "dataloader_bottleneck": phases.dataloader_bottleneck,
    "gpu_idle": phases.gpu_idle,
    "backward_imbalance": context.backward_imbalance,
    "exposed_communication": communication.exposed_communication,
    "dtype_conversion": operators.dtype_conversion,
    "layout_conversion": operators.layout_conversion,
    "small_ops": operators.small_ops,
    "unfused_norm": operators.unfused_norm,
    "host_sync": operators.host_sync,
    "optimizer_unfused": phases.optimizer_unfused,
    "step_outlier": steps.step_outlier,
    "low_gpu_utilization": system.low_gpu_utilization,
    "cpu_bottleneck": system.cpu_bottleneck,
    "io_bottleneck": system.io_bottleneck,
    "batch_size": system.batch_size,
    "memory_growth": system.memory_growth,
    "allocator_fragmentation": memory.allocator_fragmentation,
    "activation_memory": memory.activation_memory,
    "optimizer_state_memory": memory.optimizer_state_memory,
    "initialization_time": steps.initialization_time,
    "hotspot": context.hotspot,
}

#: Rules over several profiles (ranks of a window, windows of a rank).
RANK_RULES = {
    "load_imbalance": ranks.load_imbalance,
    "memory_growth": growth.memory_growth_windows,
    "share_trend": trends.share_trend,
}

__all__ = [
    "DEFAULTS",
    "RULE_IDS",
    "SEVERITIES",
    "Thresholds",
    "analyze",
    "analyze_ranks",
    "attach",
    "findings_of",
    "sort_findings",
]


def pending_overrides(profile: Profile) -> Mapping[str, float] | None:
    """The overrides a pending profile was written with (None: defaults),
    checked like any override (a damaged or foreign file)."""
    overrides = profile.analyzer_overrides
    if not overrides:
        return None
    try:
        Thresholds(overrides)
        return overrides
    except (ValueError, TypeError, AttributeError):
        logger.warning(
            "DeepContext: %s has unreadable analyzer overrides; default thresholds used",
            profile.source or "a profile",
        )
        return None


def findings_of(profile: Profile) -> list[dict[str, Any]]:
    """``profile.findings``, or for a profile written pending its analysis
    (memoised in ``profile.analysed``; the profile's data and its file are
    left as they are). A failing analysis leaves the profile without
    findings, never its reader without the profile."""
    if not profile.analysis_pending:
        return profile.findings
    if profile.analysed is None:
        try:
            profile.analysed = analyze(profile, pending_overrides(profile))
        except Exception:
            logger.warning(
                "DeepContext analyzer failed on %s; shown without findings",
                profile.source or "a profile",
                exc_info=True,
            )
            profile.analysed = []
    return profile.analysed


def sort_findings(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most severe first; within a severity, the biggest saving per step
    first, then the biggest saving of bytes at the memory peak (time and
    bytes do not compare), those with neither after, in rule order (stable)."""
    order = {rule: i for i, rule in enumerate(RULE_IDS)}

    def key(f: dict[str, Any]) -> tuple:
        gain = f.get("gain_ns")
        saved = saved_bytes(f) if gain is None else None
        return (
            SEVERITIES.index(f["severity"]),
            0 if gain is not None else 1 if saved is not None else 2,
            -(gain if gain is not None else saved or 0),
            order.get(f["rule"], len(order)),
        )

    return sorted(findings, key=key)


def analyze(profile: Profile, overrides: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Findings of one window of one rank, most severe first.

    Args:
        profile: The window to analyse.
        overrides: Threshold overrides ``{"rule.threshold": value}``.

    Raises:
        ValueError: an override names an unknown threshold.
    """
    thresholds = Thresholds(overrides)
    window = Window(profile, thresholds)
    found = []
    for rule, check in RULES.items():
        if thresholds.enabled(rule):
            found.extend(_guarded(rule, check, window))
    window.on_this_host(found)
    return sort_findings(found)


def analyze_ranks(
    profiles: list[Profile], overrides: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Findings that compare profiles: load imbalance between the ranks of a
    window, memory growth and a node's rising share across the windows of a rank. Each names its profile
    in ``evidence`` (``run``, ``rank``, ``steps``); see `attach`."""
    thresholds = Thresholds(overrides)
    found = []
    for rule, check in RANK_RULES.items():
        if thresholds.enabled(rule):
            found.extend(_guarded(rule, check, profiles, thresholds))
    return sort_findings(found)


def attach(profiles: Iterable[Profile], findings: list[dict[str, Any]]) -> None:
    """Store cross-profile findings in the profiles they name (most severe first)."""
    profiles = list(profiles)
    ranks.attach(profiles, findings)
    for p in profiles:
        p.findings = sort_findings(p.findings)


def _guarded(rule: str, check: Callable, *args: Any) -> list[dict[str, Any]]:
    # One broken rule must not cost the other findings (nor the profile).
    try:
        return check(*args)
    except Exception:
        logger.warning("DeepContext analyzer rule %s failed; skipped", rule, exc_info=True)
        return []
