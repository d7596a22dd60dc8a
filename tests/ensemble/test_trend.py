"""Trends across one rank's windows: the statistics against brute-force
references, a node's series, the rising nodes, and the ``--trend`` helpers."""

import functools
import io
import itertools
import json
import random
import statistics
from collections import Counter

import pytest
from rich.console import Console

from dc_core.cli.trend import print_trend, resolve, sparkline, trend_json, trend_rows
from dc_core.ensemble import merge
from dc_core.ensemble.series import first_rise, mann_kendall, series, theil_sen, trends
from dc_core.model.tree import tree_from_lists
from dc_core.store.profile import Profile

MS = 1_000_000
LOADER = ["dataloader", "data.py:18 __getitem__", "aten::randn"]


def _s(x) -> int:
    return sum((x[j] > x[i]) - (x[j] < x[i]) for i in range(len(x)) for j in range(i + 1, len(x)))


@functools.cache
def _distribution(data: tuple) -> Counter:
    """S over every distinct ordering of ``data`` (equally likely with no trend)."""
    return Counter(_s(p) for p in set(itertools.permutations(data)))


def _exact_p(data, s) -> float:
    """P(|S| >= |s|) by exact enumeration."""
    dist = _distribution(tuple(data))
    return sum(c for v, c in dist.items() if abs(v) >= abs(s)) / sum(dist.values())


# --- statistics -----------------------------------------------------------------
def test_mann_kendall_s_matches_brute_force_with_ties():
    rng = random.Random(3)
    for n in (2, 5, 17, 40):
        x = [rng.randint(0, 6) for _ in range(n)]
        assert mann_kendall(x)[0] == _s(x)


def test_mann_kendall_p_close_to_exact_enumeration_without_ties():
    # n = 8: the normal approximation with continuity correction stays within 0.015 of the exact p
    orders = (
        (0, 1, 2, 3, 4, 5, 6, 7),
        (1, 0, 2, 4, 3, 5, 7, 6),
        (3, 0, 2, 1, 5, 4, 7, 6),
        (7, 6, 5, 0, 1, 2, 3, 4),
    )
    for order in orders:
        s, z, p = mann_kendall(order)
        assert p == pytest.approx(_exact_p(range(8), s), abs=0.015)
        assert (z > 0) == (s > 0)
    assert mann_kendall(range(8))[:2] == (28, pytest.approx(27 / (8 * 7 * 21 / 18) ** 0.5))


def test_mann_kendall_tie_correction_is_the_exact_variance():
    # Var(S) over every ordering of a sample with ties of 2 and 3 equals the corrected formula:
    # (n(n-1)(2n+5) - 2·1·9 - 3·2·11) / 18 = 39.67 for n = 7 (uncorrected: 46.67).
    data = (1, 1, 2, 2, 2, 3, 4)
    exact = statistics.pvariance(list(_distribution(data).elements()))
    assert exact == pytest.approx(39.666666, abs=1e-4)
    s, z, p = mann_kendall((1, 2, 1, 2, 3, 4, 2))
    assert s == 11 and (s - 1) / z == pytest.approx(exact**0.5)
    assert p == pytest.approx(_exact_p(data, s), abs=0.03)


def test_mann_kendall_of_a_constant_series_is_no_trend():
    assert mann_kendall([5, 5, 5, 5]) == (0, 0.0, 1.0)


def test_theil_sen_matches_brute_force_and_ignores_an_outlier():
    x = [0, 10, 20, 30, 40, 50, 60]
    y = [1, 21, 41, 61, 1000, 101, 121]  # 2x + 1 with one wild point
    assert theil_sen(x, y) == 2.0
    rng = random.Random(1)
    xs = sorted(rng.sample(range(1000), 25))
    ys = [rng.random() for _ in xs]
    pairs = sorted((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(25) for j in range(i + 1, 25))
    assert theil_sen(xs, ys) == pytest.approx(statistics.median(pairs))


def test_first_rise_finds_the_first_window_above_the_baseline():
    ramp = [0.05] * 7 + [0.05 + 0.02 * k for k in range(1, 14)]
    assert first_rise(ramp) == 7
    assert first_rise([0.05] * 9 + [0.05 * 1.5**k for k in range(1, 14)]) == 9  # compounding growth
    assert first_rise([0.01 * k for k in range(20)]) == 1  # a line: rising from the start
    assert first_rise([0.05] * 5 + [0.2] * 7) == 5  # a jump (a new code path)
    assert first_rise([0.05] * 5 + [0.2 + 0.01 * k for k in range(7)]) == 5  # a jump, then a ramp
    assert first_rise([0.3 - 0.01 * k for k in range(12)]) == 0  # falling: no split rises
    # 1 % noise on the baseline; growth of 3 % a window compounding from window 300
    rng = random.Random(5)
    noisy = [0.02 * rng.uniform(0.99, 1.01) * (1.03 ** max(0, i - 299)) for i in range(400)]
    assert first_rise(noisy) == 300
    assert first_rise(ramp, x=[7 * i for i in range(20)]) == 7


# --- series and trends over merged windows ----------------------------------------
def _window(i, rng, rise_from=None, noise=0.05, every=100, steps=10):
    """One window: the loader's randn share is 5 % (rising by 3 points a window
    from ``rise_from``), at the expense of aten::mm; every value gets ``noise``."""
    planted = 0.05 + (
        0.03 * (i - rise_from + 1) if rise_from is not None and i >= rise_from else 0.0
    )

    def ns(share):
        return int(share * 100 * MS * (1 + rng.gauss(0, noise)))

    tree = tree_from_lists(
        (
            "forward",
            (
                "python:train|train.py:20",
                (
                    "python:forward|model.py:12",
                    f"aten::mm @cpu_time_ns={ns(0.6 - planted)}",
                    f"aten::add @cpu_time_ns={ns(0.1)}",
                    f"aten::relu @cpu_time_ns={ns(0.05)}",
                ),
            ),
        ),
        (
            "dataloader",
            ("python:__getitem__|data.py:18", f"aten::randn @cpu_time_ns={ns(planted)}"),
        ),
        ("optimizer", f"aten::add_ @cpu_time_ns={ns(0.2)}"),
    )
    start = every * i
    return Profile(
        tree=tree, steps=(start, start + steps), step_times_ns=[10 * MS] * steps, run="exp"
    )


def _ensemble(windows):
    ensemble, errors = merge(windows)
    assert errors == []
    return ensemble


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_planted_regression_found_with_its_first_rising_window(seed):
    rng = random.Random(seed)
    ensemble = _ensemble([_window(i, rng, rise_from=5) for i in range(12)])
    found = trends(ensemble, "cpu_time_ns")
    # the node only: its loader phase and __getitem__ rise by the same amount and are not repeated
    assert [ensemble.label(t.node).split(" \u203a ") for t in found] == [LOADER]
    t = found[0]
    assert t.windows[t.first_rise] == (500, 510) and t.p < 0.01 and t.s > 0
    # 3 points of 0.95 a window, windows 4..11
    assert t.rise == pytest.approx(0.03 * 7 / 0.95, rel=0.1)


@pytest.mark.parametrize("seed", range(6))
def test_noisy_flat_nodes_are_not_flagged(seed):
    # 15 % noise on every node; each of the ~10 nodes tested passes p < 0.01
    # upwards by chance about once in 200 series (2 of 60 seeds flag one).
    rng = random.Random(100 + seed)
    ensemble = _ensemble([_window(i, rng, noise=0.15) for i in range(12)])
    assert trends(ensemble, "cpu_time_ns") == []


def test_a_rising_parent_is_reported_when_its_children_do_not_explain_it():
    # aten::mm rises (+1.5 points of the window) but the line's own time rises
    # far more (+16.5 points in all): the child does not explain its parent.
    windows = []
    for i in range(10):
        own = 10 + 5 * i
        windows.append(
            Profile(
                tree=tree_from_lists(
                    (
                        f"python:step|t.py:1 @cpu_time_ns={own * MS}",
                        f"aten::mm @cpu_time_ns={(20 + i) * MS}",
                    ),
                    f"aten::other @cpu_time_ns={200 * MS}",
                ),
                steps=(10 * i, 10 * i + 2),
            )
        )
    ensemble = _ensemble(windows)
    labels = [ensemble.label(t.node) for t in trends(ensemble, "cpu_time_ns")]
    assert labels == ["t.py:1 step", "t.py:1 step \u203a aten::mm"]


def test_series_is_per_step_and_a_window_without_the_node_counts_zero():
    windows = [
        Profile(
            tree=tree_from_lists(
                ("forward", f"aten::mm @cpu_time_ns={400}"), f"aten::add @cpu_time_ns={600}"
            ),
            steps=(0, 4),
        ),
        Profile(tree=tree_from_lists(("forward", f"aten::bmm @cpu_time_ns={300}")), steps=(10, 13)),
        Profile(
            tree=tree_from_lists(
                ("forward", f"aten::mm @cpu_time_ns={800}"), f"aten::add @cpu_time_ns={800}"
            ),
            steps=(20, 28),
        ),
    ]
    # out of order: series sorts by steps
    ensemble = _ensemble([windows[2], windows[0], windows[1]])
    mm = ensemble.find(["forward", "aten::mm"])
    points = series(ensemble, mm, "cpu_time_ns")
    assert [(p.steps, p.value, p.share) for p in points] == [
        ((0, 4), 100.0, 0.4),
        ((10, 13), 0.0, 0.0),
        ((20, 28), 100.0, 0.5),
    ]
    assert [p.value for p in series(ensemble, 0, "cpu_time_ns")] == [250.0, 100.0, 200.0]
    assert [p.share for p in series(ensemble, 0, "device_time_ns")] == [0.0, 0.0, 0.0]


def test_a_node_absent_from_the_early_windows_is_found_rising():
    windows = []
    for i in range(10):
        extra = (f"aten::new_op @cpu_time_ns={i * 5 * MS}",) if i >= 4 else ()
        windows.append(
            Profile(
                tree=tree_from_lists(("forward", f"aten::mm @cpu_time_ns={100 * MS}", *extra)),
                steps=(10 * i, 10 * i + 5),
            )
        )
    ensemble = _ensemble(windows)
    found = trends(ensemble, "cpu_time_ns")
    assert [ensemble.label(t.node) for t in found] == ["forward \u203a aten::new_op"]
    assert found[0].shares[:4] == (0.0, 0.0, 0.0, 0.0) and found[0].windows[
        found[0].first_rise
    ] == (40, 45)


def test_trends_need_enough_windows_of_one_rank():
    rng = random.Random(0)
    assert trends(_ensemble([_window(i, rng, rise_from=2) for i in range(7)]), "cpu_time_ns") == []
    same = [_window(0, rng), _window(0, rng)] + [_window(i, rng) for i in range(1, 9)]
    with pytest.raises(ValueError, match="the windows of one rank"):
        trends(_ensemble(same), "cpu_time_ns")


# --- the --trend helpers ----------------------------------------------------------
@pytest.fixture(scope="module")
def rising():
    rng = random.Random(7)
    return _ensemble([_window(i, rng, rise_from=5) for i in range(30)])


def test_trend_json_of_a_path_and_of_top(rising):
    one = trend_json(rising, " \u203a ".join(LOADER))
    assert one["node"]["path"] == LOADER and one["metric"] == "cpu_time_ns"
    assert one["points"][0]["steps"] == [0, 10] and len(one["points"]) == 30
    assert (
        one["mann_kendall"]["S"] > 0
        and one["mann_kendall"]["p"] < 1e-6
        and one["theil_sen_slope"] > 0
    )
    assert one["first_rise_step"] == 500
    json.dumps(one)
    top = trend_json(rising, "top")
    assert isinstance(top, list) and [t["node"]["path"] for t in top] == [LOADER]
    by_id = trend_json(rising, str(one["node"]["id"]))
    assert by_id["points"] == one["points"]
    assert trend_json(rising, "forward")["first_rise_step"] is None  # its share falls


def test_unknown_path_names_the_spec_and_close_matches(rising):
    with pytest.raises(ValueError) as err:
        trend_rows(rising, "dataloader \u203a data.py:18 __getitem__ \u203a aten::randm")
    text = str(err.value)
    assert "aten::randm" in text and "close matches" in text and " \u203a ".join(LOADER) in text
    with pytest.raises(ValueError, match="no node 9999"):
        resolve(rising, "9999")
    assert resolve(rising, "dataloader > data.py:18 __getitem__") == rising.find(LOADER[:2])


def test_print_trend_lists_windows_and_a_sparkline(rising):
    out = io.StringIO()
    print_trend(Console(file=out, width=100), rising, "top")
    text = out.getvalue()
    assert (
        "aten::randn" in text and "rising from step 500" in text and "steps 2900\u20132909" in text
    )
    assert "24 of 30 windows shown" in text
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
    assert len(sparkline(list(range(500)), 60)) == 60
