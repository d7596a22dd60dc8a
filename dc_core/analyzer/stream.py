"""The analyzer over a logdir's files in bounded memory.

`analyze_ranks` takes every profile at once, which for thousands of ranks
is gigabytes of trees. `analyze_files` gets the same findings group by
group: the cross-rank rule per window (from `ROBUST_FROM` ranks on, through
the cross-rank index, as the report reads it; smaller windows are read
whole), the across-windows rules per rank (one rank's windows at a time),
then each profile is read again, analysed and handed back one at a time,
its ``exposed_communication`` findings told where a straggler the window's
ranks wait for explains them (`communication.waiting_for`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..ensemble.outliers import ROBUST_FROM
from ..store.logdir import ProfileFile, read_profile
from ..store.profile import Profile, ProfileError
from . import RANK_RULES, _guarded, analyze, pending_overrides, sort_findings
from .communication import waiting_for
from .ranks import load_imbalance_files
from .thresholds import Thresholds


def _read(files: Sequence[ProfileFile], limit: int) -> list[Profile]:
    out = []
    for file in files:
        try:
            out.append(read_profile(file, limit))
        except ProfileError:
            continue  # `analyze_files` names it when it reads the file for its own findings
    return out


def cross_profile_findings(
    files: Sequence[ProfileFile], t: Thresholds, limit: int
) -> list[dict[str, Any]]:
    """What `analyze_ranks` finds, computed a window or a rank at a time."""
    by_window: dict[tuple, list[ProfileFile]] = {}
    by_rank: dict[tuple, list[ProfileFile]] = {}
    for file in files:
        by_window.setdefault((file.run, file.steps), []).append(file)
        by_rank.setdefault((file.run, file.rank), []).append(file)
    found = []
    if t.enabled("load_imbalance"):
        for group in by_window.values():
            ranks = {f.rank for f in group}
            if len(ranks) >= ROBUST_FROM:
                found += _guarded("load_imbalance", load_imbalance_files, group, t, limit)
            elif len(ranks) > 1:
                found += _guarded(
                    "load_imbalance", RANK_RULES["load_imbalance"], _read(group, limit), t
                )
    across = [rule for rule in RANK_RULES if rule != "load_imbalance" and t.enabled(rule)]
    for group in by_rank.values():
        if len(group) > 1 and across:
            profiles = _read(sorted(group, key=lambda f: f.steps), limit)
            for rule in across:
                found += _guarded(rule, RANK_RULES[rule], profiles, t)
    return found


def analyze_files(
    files: Sequence[ProfileFile], limit: int, overrides: Mapping[str, float] | None = None
) -> Iterator[tuple[ProfileFile, Profile | ProfileError]]:
    """Each file's profile with its findings (its own and the cross-profile
    ones that name it), or the error reading it; one profile in memory at a time.

    Raises:
        ValueError: an override names an unknown threshold (before anything is read).
    """
    t = Thresholds(overrides)
    named: dict[tuple, list[dict[str, Any]]] = {}
    stragglers: dict[tuple, list[dict[str, Any]]] = {}  # per window: what its ranks wait for
    for f in cross_profile_findings(files, t, limit):
        e = f.get("evidence", {})
        named.setdefault((e.get("run"), e.get("rank"), tuple(e.get("steps", ()))), []).append(f)
        if f["rule"] == "load_imbalance":
            stragglers.setdefault((e.get("run"), tuple(e.get("steps", ()))), []).append(f)
    for file in files:
        try:
            profile = read_profile(file, limit)
        except ProfileError as exc:
            yield file, exc
            continue
        stored = pending_overrides(profile)  # what the session was told, unless overridden here
        own = waiting_for(
            analyze(profile, overrides or stored),
            stragglers.get((profile.run, tuple(profile.steps)), []),
            profile.rank,
        )
        found = own + named.get((profile.run, profile.rank, tuple(profile.steps)), [])
        # the read one unchanged
        yield (
            file,
            replace(
                profile,
                findings=sort_findings(found),
                analysis_pending=False,
                analyzer_overrides={},
            ),
        )
