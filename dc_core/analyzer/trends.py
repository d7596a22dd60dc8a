"""``share_trend``: a node taking a growing share of the window across the
windows of one rank (a regression that builds up over the run).

The windows of each (run, rank) are merged into one `Ensemble` and judged by
`dc_core.ensemble.series.trends` (Mann–Kendall, Theil–Sen). The finding is
stored in the rank's last window, whose tree holds the node's ``node`` id.
"""

from __future__ import annotations

from typing import Any

from ..ensemble import merge
from ..ensemble.outliers import time_metric
from ..ensemble.series import Trend, trends
from ..model.window import steps_text
from ..store.profile import Profile
from .base import finding, located, percent
from .thresholds import Thresholds

SUGGESTION = (
    "something here does more work as training goes on: compare its first and last windows "
    "(`deepcontext report --trend` with this path) and look for inputs that grow (sequence lengths, "
    "padding), lists or caches kept across steps, recompilation, or periodic work (logging, evaluation) "
    "that runs more often"
)


def share_trend(profiles: list[Profile], t: Thresholds) -> list[dict[str, Any]]:
    """Per (run, rank) with ≥ min_windows windows, the nodes whose share of
    the window rises (Mann–Kendall p < alpha, Theil–Sen rise ≥ min_rise),
    the ``top`` largest rises (warning)."""
    by_rank: dict[tuple[str, int], dict[tuple[int, int], Profile]] = {}
    for p in profiles:
        # A window read twice (one rank on two hosts) would tie its steps; keep the first.
        by_rank.setdefault((p.run, p.rank), {}).setdefault(tuple(p.steps), p)
    out = []
    for _, windows in sorted(by_rank.items()):
        if len(windows) < t["share_trend.min_windows"]:
            continue
        ordered = [windows[s] for s in sorted(windows)]
        ensemble, _ = merge(ordered)  # profiles already read: no file errors
        metric = time_metric(ensemble)
        found = trends(
            ensemble,
            metric,
            t["share_trend.min_share"],
            t["share_trend.alpha"],
            t["share_trend.min_rise"],
            int(t["share_trend.min_windows"]),
        )
        out.extend(
            _finding(ensemble, ordered[-1], trend, metric)
            for trend in found[: int(t["share_trend.top"])]
        )
    return out


def p_text(p: float) -> str:
    """A p-value in as few digits as tell it: ``0.004``, ``3.1e-07``."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _node_in(profile: Profile, frames: list) -> int:
    """The node with these path frames in ``profile``'s tree, or -1."""
    node = 0
    for frame in frames:
        found = profile.tree.find_child(node, frame)
        if found is None:
            return -1
        node = found
    return node


def _finding(ensemble, last: Profile, trend: Trend, metric: str) -> dict[str, Any]:
    path = ensemble.path(trend.node)
    frames = [ensemble.node_frame(n) for n in path]
    first_step = trend.windows[trend.first_rise][0]
    message = (
        f"{frames[-1].label()} takes a rising share of the window on rank {last.rank}: "
        f"{percent(trend.shares[0])} in the first window ({steps_text(trend.windows[0])}), "
        f"{percent(trend.shares[-1])} in the last ({steps_text(trend.windows[-1])}); rising from step "
        f"{first_step}, {100 * trend.rise:+.1f} points of the window since by the Theil–Sen slope "
        f"(Mann–Kendall p = {p_text(trend.p)} over {len(trend.windows)} windows)"
    )
    evidence = {
        **located(last),
        "metric": metric,
        "windows": [list(w) for w in trend.windows],
        "shares": [round(s, 5) for s in trend.shares],
        "p": float(f"{trend.p:.3g}"),
        "S": trend.s,
        "z": round(trend.z, 3),
        "theil_sen_slope": float(f"{trend.slope:.4g}"),
        "rise": round(trend.rise, 5),
        "first_rise_step": first_step,
    }
    node = _node_in(last, frames)
    f = finding(
        "share_trend",
        "warning",
        message,
        SUGGESTION,
        last.tree if node > 0 else None,
        node,
        evidence,
        gain_ns=None,
        gain_basis="a drift across windows: what stopping it saves depends on how far it goes",
    )
    if node < 0:  # not in the last window (its share fell to 0 there): still name the path
        f["path"] = [frame.label() for frame in frames]
    return f
