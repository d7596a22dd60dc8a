"""step_outlier and initialization_time."""

from dc_core.analyzer import analyze

from .helpers import MS, only, profile, rules, series

TREE = ("forward", f"aten::mm @cpu_time_ns={10 * MS}")


def test_step_outlier_one_slow_step_among_ten():
    times = [100 * MS + i * MS for i in range(10)]
    times[6] = 160 * MS  # 1.6x the median: only the 3-sigma test catches it
    cpu = [20] * 62 + [95] * 16 + [20] * 30  # samples 62..77: the slow step (615..775 ms) kept the CPUs busy
    p = profile(TREE, steps=(10, 20), step_times=times, system=[series("cpu_percent", cpu, device=0, interval_ns=10 * MS)])
    f = only(analyze(p), "step_outlier")
    assert f["evidence"]["steps"] == [16] and f["evidence"]["reasons"] == {16: ["sigma"]}
    assert f["evidence"]["times_ns"] == [160 * MS]
    assert f["evidence"]["system_during_slow_steps"]["cpu_percent[0]"]["slow"] == 95.0
    assert "cpu_percent[0]" in f["message"] and f["node"] == -1


def test_step_outlier_twice_the_median_with_few_steps():
    p = profile(TREE, steps=(5, 9), step_times=[50 * MS, 52 * MS, 130 * MS, 51 * MS])
    f = only(analyze(p), "step_outlier")
    assert f["evidence"]["steps"] == [7] and f["evidence"]["reasons"] == {7: ["median"]}
    assert f["evidence"]["median_ns"] == 51_500_000


def test_step_outlier_quiet_for_steady_steps_and_for_jitter():
    steady = profile(TREE, steps=(0, 12), step_times=[100 * MS + (i % 3) * MS for i in range(12)])
    assert "step_outlier" not in rules(analyze(steady))
    tiny = profile(TREE, steps=(0, 4), step_times=[10_000, 10_000, 90_000, 10_000])  # µs-scale jitter
    assert "step_outlier" not in rules(analyze(tiny))


def test_initialization_time_when_long():
    p = profile(TREE, init_ns=90 * 10**9, step_times=[MS * 500] * 3)
    f = only(analyze(p), "initialization_time")
    assert f["severity"] == "warning" and f["evidence"]["init_ns"] == 90 * 10**9
    assert "180 steps" in f["message"]
    assert only(analyze(p, {"initialization_time.critical_s": 60}), "initialization_time")["severity"] == "critical"


def test_initialization_time_quiet_when_short_or_unknown():
    assert "initialization_time" not in rules(analyze(profile(TREE, init_ns=2 * 10**9)))
    assert "initialization_time" not in rules(analyze(profile(TREE, init_ns=-1)))


def test_regression_first_window_step_of_a_tiny_model_was_an_outlier():
    """A 0.6 ms step whose window's first step paid 1.3 ms of first-call costs
    was reported as a step outlier; a few milliseconds are below notice."""
    p = profile(TREE, steps=(3, 6), step_times=[1_900_000, 600_000, 620_000])
    assert [f for f in analyze(p) if f["rule"] == "step_outlier"] == []
