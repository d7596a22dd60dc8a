"""step_outlier and initialization_time."""

from dc_core.analyzer import analyze
from tests.analyzer.helpers import MS, only, profile, rules, series

TREE = ("forward", f"aten::mm @cpu_time_ns={10 * MS}")


def test_step_outlier_one_slow_step_among_ten():
    times = [100 * MS + i * MS for i in range(10)]
    times[6] = 160 * MS  # 1.6x the median: only the 3-sigma test catches it
    # samples 62..77: the slow step (615..775 ms) kept the CPUs busy
    cpu = [20] * 62 + [95] * 16 + [20] * 30
    p = profile(
        TREE,
        steps=(10, 20),
        step_times=times,
        system=[series("cpu_percent", cpu, device=0, interval_ns=10 * MS)],
    )
    f = only(analyze(p), "step_outlier")
    assert f["evidence"]["steps"] == [16] and f["evidence"]["reasons"] == {16: ["sigma"]}
    assert f["evidence"]["times_ns"] == [160 * MS]
    assert f["evidence"]["system_during_slow_steps"]["cpu_percent[0]"]["slow"] == 95.0
    assert "cpu_percent[0]" in f["message"] and f["node"] == -1
    # one step 1.6x the others: a loaded host does that, so a note, not a warning
    assert (
        f["severity"] == "info"
        and "a single step 1.5x the median may be machine noise" in f["message"]
    )


def test_step_outlier_twice_the_median_with_few_steps():
    p = profile(TREE, steps=(5, 9), step_times=[50 * MS, 52 * MS, 130 * MS, 51 * MS])
    f = only(analyze(p), "step_outlier")
    assert f["evidence"]["steps"] == [7] and f["evidence"]["reasons"] == {7: ["median"]}
    assert f["evidence"]["median_ns"] == 51_500_000
    assert f["severity"] == "info" and "4 steps are too few" in f["message"]


def test_step_outlier_quiet_for_steady_steps_and_for_jitter():
    steady = profile(TREE, steps=(0, 12), step_times=[100 * MS + (i % 3) * MS for i in range(12)])
    assert "step_outlier" not in rules(analyze(steady))
    # µs-scale jitter
    tiny = profile(TREE, steps=(0, 4), step_times=[10_000, 10_000, 90_000, 10_000])
    assert "step_outlier" not in rules(analyze(tiny))


def test_initialization_time_when_long():
    p = profile(TREE, init_ns=90 * 10**9, step_times=[MS * 500] * 3)
    f = only(analyze(p), "initialization_time")
    assert f["severity"] == "warning" and f["evidence"]["init_ns"] == 90 * 10**9
    assert "180 steps" in f["message"]
    assert (
        only(analyze(p, {"initialization_time.critical_s": 60}), "initialization_time")["severity"]
        == "critical"
    )


def test_initialization_time_quiet_when_short_or_unknown():
    assert "initialization_time" not in rules(analyze(profile(TREE, init_ns=2 * 10**9)))
    assert "initialization_time" not in rules(analyze(profile(TREE, init_ns=-1)))


def test_regression_first_window_step_of_a_tiny_model_was_an_outlier():
    """A 0.6 ms step whose window's first step paid 1.3 ms of first-call costs
    was reported as a step outlier; a few milliseconds are below notice."""
    p = profile(TREE, steps=(3, 6), step_times=[1_900_000, 600_000, 620_000])
    assert [f for f in analyze(p) if f["rule"] == "step_outlier"] == []


def test_regression_clean_three_step_window_mildly_slow_step_was_a_warning():
    """A healthy 3-step MLP window got a step_outlier warning in 1 of 3 runs:
    on three steps one noisy step is no evidence. A mildly slow step is not
    reported; even a 10x one is only a note."""
    mild = profile(TREE, steps=(2, 5), step_times=[100 * MS, 140 * MS, 101 * MS])
    assert [f for f in analyze(mild) if f["rule"] == "step_outlier"] == []
    for slow_ms in (140, 250, 1000):
        p = profile(TREE, steps=(2, 5), step_times=[100 * MS, slow_ms * MS, 101 * MS])
        assert [f["severity"] for f in analyze(p) if f["rule"] == "step_outlier"] in ([], ["info"])
    noted = only(
        analyze(profile(TREE, steps=(2, 5), step_times=[100 * MS, 1000 * MS, 101 * MS])),
        "step_outlier",
    )
    assert noted["severity"] == "info" and noted["evidence"]["steps"] == [3]


def test_step_outlier_truly_slow_step_is_a_warning():
    times = [100 * MS, 102 * MS, 1000 * MS, 101 * MS, 99 * MS]  # 10x the median, 900 ms above it
    f = only(analyze(profile(TREE, steps=(10, 15), step_times=times)), "step_outlier")
    assert f["severity"] == "warning" and f["evidence"]["steps"] == [12]
    assert "machine noise" not in f["message"]


def test_step_outlier_blips_on_short_steps_are_notes():
    # 2.5x and 3x a 10 ms step: a scheduler time slice or two, not evidence
    times = [10 * MS, 11 * MS, 25 * MS, 10 * MS, 10 * MS, 30 * MS, 11 * MS]
    f = only(analyze(profile(TREE, steps=(0, 7), step_times=times)), "step_outlier")
    assert f["evidence"]["steps"] == [2, 5] and f["severity"] == "info"
    assert "less than 20.0 ms above the median" in f["message"]


def test_step_outlier_repeated_excess_is_a_warning_single_blip_a_note():
    steady = [100 * MS + (i % 4) * MS for i in range(12)]
    once = list(steady)
    once[5] = 190 * MS  # 1.9x: slow by the robust sigma test only
    assert (
        only(analyze(profile(TREE, steps=(0, 12), step_times=once)), "step_outlier")["severity"]
        == "info"
    )
    periodic = list(once)
    periodic[11] = 185 * MS  # the same excess again: periodic work, not a blip
    f = only(analyze(profile(TREE, steps=(0, 12), step_times=periodic)), "step_outlier")
    assert f["severity"] == "warning" and f["evidence"]["steps"] == [5, 11]
    assert f["evidence"]["reasons"] == {5: ["sigma"], 11: ["sigma"]}


def test_step_outlier_sigma_test_is_robust_to_the_outliers_themselves():
    """Three slow steps among ten inflate a mean-and-σ yardstick past them
    (mean + 3σ of the others); the median and MAD stay with the steady steps."""
    times = [100 * MS + (i % 3) * MS for i in range(10)]
    for i in (2, 5, 8):
        times[i] = 170 * MS
    f = only(analyze(profile(TREE, steps=(0, 10), step_times=times)), "step_outlier")
    assert f["evidence"]["steps"] == [2, 5, 8] and f["severity"] == "warning"


def test_step_outlier_thresholds_can_make_a_short_window_warn():
    p = profile(TREE, steps=(2, 5), step_times=[100 * MS, 1000 * MS, 101 * MS])
    assert (
        only(analyze(p, {"step_outlier.warn_min_steps": 3}), "step_outlier")["severity"]
        == "warning"
    )


def test_a_slow_step_the_host_took_is_a_note_and_saves_nothing():
    times = [100 * MS, 102 * MS, 1000 * MS, 101 * MS, 99 * MS]  # as above: 10x the median...
    waits = [0, MS, 880 * MS, 0, 0]  # ...but 880 ms of it the step's thread waited for a CPU
    f = only(
        analyze(profile(TREE, steps=(10, 15), step_times=times, step_wait_ns=waits)), "step_outlier"
    )
    assert f["severity"] == "info" and "the host gave 880.0 ms of it to other work" in f["message"]
    assert f["evidence"]["stolen_ns"] == {12: 880 * MS} and f["gain_ns"] == 0


def test_a_truly_slow_step_saves_its_excess_spread_over_the_window():
    times = [100 * MS, 102 * MS, 1000 * MS, 101 * MS, 99 * MS]
    f = only(
        analyze(profile(TREE, steps=(10, 15), step_times=times, step_wait_ns=[0] * 5)),
        "step_outlier",
    )
    assert f["severity"] == "warning" and f["gain_ns"] == (1000 - 101) * MS // 5


def test_regression_slow_steps_the_workers_wait_covers_are_a_note():
    """Under a busy loop the first steps of a CNN's window took 234 and 178 ms
    against 53 ms; its thread's own wait for a CPU explained under half, while
    its intra-op workers, which the step waits on, waited far more. Their wait
    is known for the window only: where it covers the slow steps' excess, the
    host's load may be all of it."""
    times = [234 * MS, 178 * MS, 53 * MS, 52 * MS, 55 * MS, 54 * MS]
    waits = [60 * MS, 40 * MS, 25 * MS, 25 * MS, 26 * MS, 25 * MS]
    covered = profile(
        TREE, steps=(2, 8), step_times=times, step_wait_ns=waits, others_wait_ns=456 * MS
    )
    f = only(analyze(covered), "step_outlier")
    assert f["severity"] == "info" and "other threads waited 456.0 ms" in f["message"]
    # what the workers' wait cannot cover stays a warning
    short = profile(
        TREE, steps=(2, 8), step_times=times, step_wait_ns=waits, others_wait_ns=50 * MS
    )
    assert only(analyze(short), "step_outlier")["severity"] == "warning"
