"""load_imbalance across ranks and memory_growth across windows."""

import pytest

from dc_core.analyzer import analyze_ranks, attach
from tests.analyzer.helpers import MS, line, only, profile, series

TRAIN = line("train", "train.py:20")


def _rank(rank, extra_ms=0, steps=(5, 8), loader_ms=10):
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (line("forward", "model.py:12"), f"aten::addmm @cpu_time_ns={60 * MS},count=3"),
            ),
        ),
        (
            "dataloader",
            (
                line("__getitem__", "data.py:18"),
                f"aten::randn @cpu_time_ns={(loader_ms + extra_ms) * MS},count=3",
            ),
        ),
        steps=steps,
        rank=rank,
        world_size=4,
        run="exp",
    )
    return p


def test_load_imbalance_names_the_slow_rank_and_its_node():
    profiles = [_rank(0), _rank(1), _rank(2, extra_ms=60), _rank(3)]
    f = only(analyze_ranks(profiles), "load_imbalance")
    assert (
        f["severity"] == "warning"
        and f["evidence"]["rank"] == 2
        and f["evidence"]["steps"] == [5, 8]
    )
    assert f["evidence"]["ratio"] == round(130 / 70, 3)
    assert f["path"] == ["dataloader", "data.py:18 __getitem__", "aten::randn"]
    assert "rank 2" in f["message"]
    attach(profiles, [f])
    assert [len(p.findings) for p in profiles] == [0, 0, 1, 0]


def _worker(rank, load=1.0, extra_ms=0):
    """A rank's window: the same MLP work on every rank, its times stretched by
    ``load`` (a busy host), plus ``extra_ms`` of work only this rank does."""

    def op(name, time_ms, count):
        return f"{name} @cpu_time_ns={int(time_ms * load * MS)},count={count}"

    forward = [line("forward", "model.py:12"), op("aten::addmm", 30, 9)]
    extra = (
        [(line("straggler_work", "model.py:40"), op("aten::matmul", extra_ms, 12))]
        if extra_ms
        else []
    )
    p = profile(
        ("forward", (TRAIN, tuple(forward), *extra)),
        (
            "backward",
            (TRAIN, (line("forward", "model.py:12"), op("aten::addmm [backward]", 60, 9))),
        ),
        ("optimizer", (line("step", "train.py:24"), op("aten::add_", 10, 6))),
        steps=(2, 5),
        rank=rank,
        world_size=3,
        run="exp",
    )
    return p


def test_regression_slow_rank_named_by_work_that_host_load_cannot_invert():
    """Ranks timed one after another on a loaded 2-core host: a busy spell
    stretched rank 0's steps past those of rank 1, which does 4x the work,
    and rank 0 was named. Against the work every rank shares, rank 1 stays
    4x whatever the load."""
    for load in (1.0, 3.0, 6.0):
        profiles = [_worker(0, load=load), _worker(1, extra_ms=300), _worker(2)]
        f = only(analyze_ranks(profiles), "load_imbalance")
        assert f["severity"] == "warning" and f["evidence"]["rank"] == 1, (load, f["message"])
        assert f["evidence"]["measure"] == "work" and f["evidence"]["ratio"] == round(400 / 100, 3)
        assert f["path"] == [
            "forward",
            "train.py:20 train",
            "model.py:40 straggler_work",
            "aten::matmul",
        ]
        assert "rank 1 does 4.00x the work" in f["message"]
        attach(profiles, [f])
        assert [len(p.findings) for p in profiles] == [0, 1, 0]


def test_load_imbalance_uniformly_slow_rank_is_named_by_step_time():
    # the same work everywhere, rank 2 takes twice as long at it (a slow device, a busy host)
    f = only(analyze_ranks([_worker(0), _worker(1), _worker(2, load=2.0)]), "load_imbalance")
    assert f["evidence"]["rank"] == 2 and f["evidence"]["measure"] == "step_time"
    assert f["evidence"]["ratio"] == 2.0 and f["evidence"]["work_ratio_per_rank"] == {
        "0": 1.0,
        "1": 1.0,
        "2": 1.0,
    }


def test_load_imbalance_info_when_a_node_share_differs():
    # same step time, but rank 1 spends twice the share in data loading
    profiles = [_rank(0, loader_ms=10), _rank(1, loader_ms=20)]
    profiles[1].step_times_ns = profiles[0].step_times_ns
    f = only(analyze_ranks(profiles), "load_imbalance")
    assert f["severity"] == "info" and f["evidence"]["rank"] == 1
    assert f["path"][0] == "dataloader"
    assert f["evidence"]["share_per_rank"] == {"0": round(10 / 70, 4), "1": round(20 / 80, 4)}


def test_load_imbalance_quiet_for_balanced_ranks_or_one_rank():
    assert analyze_ranks([_rank(0), _rank(1), _rank(2)]) == []
    assert analyze_ranks([_rank(0, extra_ms=100)]) == []


def test_memory_growth_across_windows_of_a_rank():
    mib = 2**20
    windows = [_rank(0, steps=(s, s + 3)) for s in (10, 20, 30, 40)]
    for i, p in enumerate(windows):
        p.system = [series("rss_bytes", [1000 * mib + i * 100 * mib] * 5)]
    f = only(analyze_ranks(windows), "memory_growth")
    assert f["evidence"]["rank"] == 0 and f["evidence"]["steps"] == [40, 43]
    assert f["evidence"]["growth_bytes"] == 300 * mib and f["evidence"]["windows"][0] == [10, 13]


def test_memory_growth_across_windows_quiet_when_flat():
    windows = [_rank(0, steps=(s, s + 3)) for s in (10, 20, 30)]
    for p in windows:
        p.system = [series("rss_bytes", [2**30] * 5)]
    assert analyze_ranks(windows) == []


def test_many_ranks_name_the_outlier_rank_and_its_nodes_not_the_waiting_ranks():
    import random

    from tests.ensemble.test_outliers import ddp_rank

    rng = random.Random(11)
    profiles = [ddp_rank(rank, 9, rng) for rank in range(16)]
    found = [f for f in analyze_ranks(profiles) if f["rule"] == "load_imbalance"]
    assert len(found) == 1
    f = found[0]
    assert f["severity"] == "warning" and f["evidence"]["rank"] == 9
    assert f["evidence"]["outlier_ranks"] == [9]  # the 15 ranks waiting in all-reduce are not slow
    assert f["path"][:3] == ["forward", "train.py:40 train", "blocks.0.mlp"]
    assert "rank 9 is an outlier among 16 ranks" in f["message"] and "blocks.0.mlp" in f["message"]
    assert f["path"][-1] == "aten::linear"  # all of the excess is in the one operator
    assert f["evidence"]["value_ns"] - f["evidence"]["median_ns"] == pytest.approx(
        500_000, rel=0.05
    )
