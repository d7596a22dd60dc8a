"""Outlier ranks: robust z-scores, collective waits apart from compute, the nodes named."""

from __future__ import annotations

import random

import pytest

from dc_core.ensemble import merge
from dc_core.ensemble.outliers import outliers, rank_times
from dc_core.ensemble.rows import merged_json
from dc_core.model.opnames import is_collective
from dc_core.model.tree import tree_from_lists
from dc_core.store.profile import Profile


def ddp_rank(
    rank: int, slow: int | None, rng: random.Random, factor: float = 2.0, steps: int = 2
) -> Profile:
    """forward (attn, mlp) and backward with an all-reduce that lasts until the
    slowest rank arrives: the others wait for ``slow``'s extra MLP time."""
    mlp = int(1_000_000 * rng.uniform(0.97, 1.03))
    extra = int(1_000_000 * (factor - 1))
    own = extra if rank == slow else 0
    wait = 200_000 + (extra if slow is not None else 0) - own
    attn = int(1_000_000 * rng.uniform(0.97, 1.03))
    tree = tree_from_lists(
        (
            "forward",
            (
                "python:train|train.py:40",
                ("module:blocks.0.attn", f"aten::bmm @cpu_time_ns={attn},count=2"),
                ("module:blocks.0.mlp", f"aten::linear @cpu_time_ns={mlp + own},count=2"),
            ),
        ),
        ("backward", f"c10d::allreduce_ [backward] @cpu_time_ns={wait},count=2"),
    )
    total = tree.inclusive("cpu_time_ns")[0]
    return Profile(
        tree=tree,
        steps=(10, 10 + steps),
        step_times_ns=[total // steps] * steps,
        rank=rank,
        host=f"n{rank // 4}",
    )


def test_collectives_are_recognised_and_gather_is_not():
    assert is_collective("operator", "c10d::allreduce_") and is_collective(
        "operator", "all-reduce.7"
    )
    assert is_collective("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert not is_collective("operator", "aten::gather") and not is_collective(
        "operator", "aten::scatter_"
    )
    assert not is_collective("python", "c10d::allreduce_")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_slow_rank_is_the_outlier_and_the_waiting_ranks_are_not(seed):
    rng = random.Random(seed)
    e, _ = merge([ddp_rank(r, 9, rng) for r in range(16)])
    times = rank_times(e)
    steps = [t.step for t in times]
    # synchronous: every step lasts as long as the slowest rank's
    assert max(steps) / min(steps) < 1.05
    assert times[9].wait == pytest.approx(100_000, rel=0.01) and times[0].wait == pytest.approx(
        600_000, rel=0.01
    )
    found = outliers(e)
    assert [o.rank for o in found] == [9]
    top = found[0]
    assert top.measure in ("compute", "phase forward") and top.z > 10 and top.ratio > 1.3
    assert [e.node_frame(n).name for n in e.path(top.node)][-1] in ("blocks.0.mlp", "aten::linear")
    assert "blocks.0.mlp" in [e.node_frame(n).name for n in e.path(top.node)]
    assert top.excess == pytest.approx(500_000, rel=0.05)  # 1 ms extra over 2 steps


def test_no_outlier_among_even_ranks():
    rng = random.Random(5)
    e, _ = merge([ddp_rank(r, None, rng) for r in range(32)])
    assert outliers(e) == []


def test_a_rank_whose_steps_are_slow_without_more_compute_is_a_step_outlier():
    rng = random.Random(3)
    profiles = [ddp_rank(r, None, rng) for r in range(10)]
    # e.g. a stalled input pipeline
    profiles[4].step_times_ns = [t * 3 for t in profiles[4].step_times_ns]
    found = outliers(merge(profiles)[0])
    assert [(o.rank, o.measure) for o in found] == [(4, "step")]
    assert found[0].ratio == pytest.approx(3.0, rel=0.05)


def test_few_ranks_use_the_ratio_to_the_median():
    rng = random.Random(1)
    e, _ = merge([ddp_rank(r, 2, rng, factor=3.0) for r in range(4)])
    found = outliers(e, ratio=1.2)
    assert [o.rank for o in found] == [2] and found[0].z is None
    e, _ = merge([ddp_rank(r, 2, rng, factor=1.1) for r in range(4)])
    assert outliers(e, ratio=1.2) == []  # 10% is within what 4 ranks can tell apart


def test_merged_json_has_spread_and_outliers():
    rng = random.Random(0)
    e, _ = merge([ddp_rank(r, 9, rng) for r in range(12)])
    doc = merged_json(e)
    assert (
        doc["ranks"] == list(range(12))
        and doc["steps"] == [10, 12]
        and doc["metric"] == "cpu_time_ns"
    )
    forward = next(c for c in doc["tree"]["children"] if c["name"] == "forward")
    mlp = forward["children"][0]["children"][0]
    assert mlp["name"] == "blocks.0.mlp"  # heaviest first: the slow rank's MLP lifts the mean
    stats = mlp["stats"]["cpu_time_ns"]
    values = e.values("cpu_time_ns", mlp["id"]).tolist()
    assert (stats["sum"], stats["max"], stats["min"], stats["max_rank"]) == (
        sum(values),
        max(values),
        min(values),
        9,
    )
    assert stats["imbalance"] == pytest.approx(
        (max(values) - sum(values) / 12) / max(values), abs=1e-6
    )
    assert [o["rank"] for o in doc["outliers"]] == [9]
    assert doc["outliers"][0]["node"]["path"][:3] == [
        "forward",
        "train.py:40 train",
        "blocks.0.mlp",
    ]
