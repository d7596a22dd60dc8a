"""share_trend: a node's share of the window rising across the windows of a rank."""

import random

import pytest

from dc_core.analyzer import analyze_ranks, attach
from dc_core.store.profile import decode, encode
from tests.analyzer.helpers import MS, line, only, profile, rules

LOADER = ["dataloader", "data.py:18 __getitem__", "aten::randn"]


def _window(i, rng, rank=0, rise_from=None, noise=0.05):
    """Window ``i`` (steps 100i..100i+9) of ``rank``: aten::randn under the loader
    takes 5 % of the window, 3 points more per window from ``rise_from`` on, at
    the expense of aten::mm; every value gets ``noise`` (relative)."""
    planted = 0.05 + (
        0.03 * (i - rise_from + 1) if rise_from is not None and i >= rise_from else 0.0
    )

    def op(name, share):
        return f"{name} @cpu_time_ns={int(share * 100 * MS * (1 + rng.gauss(0, noise)))},count=10"

    return profile(
        (
            "forward",
            (
                line("train", "train.py:20"),
                (
                    line("forward", "model.py:12"),
                    op("aten::mm", 0.6 - planted),
                    op("aten::add", 0.1),
                    op("aten::relu", 0.05),
                ),
            ),
        ),
        ("dataloader", (line("__getitem__", "data.py:18"), op("aten::randn", planted))),
        ("optimizer", op("aten::add_", 0.2)),
        steps=(100 * i, 100 * i + 10),
        rank=rank,
        run="exp",
    )


def _run(seed=0, windows=12, rise_from=5, flat_rank=True):
    rng = random.Random(seed)
    out = [_window(i, rng, 0, rise_from) for i in range(windows)]
    if flat_rank:
        out += [_window(i, rng, 1) for i in range(windows)]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rising_node_is_named_with_its_first_rising_step(seed):
    profiles = _run(seed)
    f = only(analyze_ranks(profiles), "share_trend")
    e = f["evidence"]
    assert f["severity"] == "warning" and f["path"] == LOADER
    # stored in the rank's last window
    assert (e["run"], e["rank"], e["steps"]) == (
        "exp",
        0,
        [1100, 1110],
    )
    last = profiles[11]
    assert [last.tree.node_frame(n).label() for n in last.tree.path(f["node"])] == LOADER
    assert e["first_rise_step"] == 500 and e["windows"][0] == [0, 10] and len(e["shares"]) == 12
    assert (
        e["p"] < 0.01 and e["S"] > 0 and e["theil_sen_slope"] > 0 and e["metric"] == "cpu_time_ns"
    )
    assert e["shares"][0] == pytest.approx(0.05, abs=0.01) and e["shares"][-1] == pytest.approx(
        0.26, abs=0.03
    )
    first, end = f"{100 * e['shares'][0]:.1f}%", f"{100 * e['shares'][-1]:.1f}%"
    assert (
        f"aten::randn takes a rising share of the window on rank 0: {first} in the first window"
        in f["message"]
    )
    assert (
        f"{end} in the last (steps 1100\u20131109)" in f["message"]
        and "rising from step 500" in f["message"]
    )
    assert "--trend" in f["suggestion"]


def test_finding_is_stored_in_the_last_window_and_survives_the_file():
    profiles = _run()
    findings = [f for f in analyze_ranks(profiles) if f["rule"] == "share_trend"]
    attach(profiles, findings)
    assert [len(p.findings) for p in profiles] == [0] * 11 + [1] + [0] * 12
    back = decode(encode(profiles[11]))
    assert (
        back.findings[0]["evidence"] == findings[0]["evidence"]
        and back.findings[0]["path"] == LOADER
    )


@pytest.mark.parametrize("seed", range(5))
def test_noisy_flat_windows_give_no_finding(seed):
    rng = random.Random(50 + seed)
    profiles = [_window(i, rng, noise=0.15) for i in range(16)]
    assert "share_trend" not in rules(analyze_ranks(profiles))


def test_needs_min_windows_and_can_be_turned_off():
    seven = _run(windows=7, rise_from=2, flat_rank=False)
    assert "share_trend" not in rules(analyze_ranks(seven))
    assert "share_trend" in rules(analyze_ranks(seven, {"share_trend.min_windows": 6}))
    assert "share_trend" not in rules(analyze_ranks(_run(), {"share_trend.enabled": 0}))


def test_a_small_rise_is_below_min_rise():
    # randn gains 0.05 points of the window per window: significant, but 0.55 points in all
    rng = random.Random(0)
    profiles = []
    for i in range(12):
        p = _window(i, rng, noise=0.0)
        randn = p.tree.find("dataloader", "data.py:18 __getitem__", "aten::randn")
        p.tree.add(randn, "cpu_time_ns", int(i * 0.05 * MS))
        profiles.append(p)
    assert "share_trend" not in rules(analyze_ranks(profiles))
    f = only(analyze_ranks(profiles, {"share_trend.min_rise": 0.004}), "share_trend")
    assert f["path"] == LOADER
