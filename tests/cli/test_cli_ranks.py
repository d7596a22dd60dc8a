"""`deepcontext report` on a window of many ranks (the cross-rank tree and the
outliers by default) and on many windows (``--trend``)."""

from __future__ import annotations

import json
import random

import pytest

from dc_core.cli import main
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile
from tests.ensemble.test_outliers import ddp_rank


@pytest.fixture
def twelve_ranks(tmp_path):
    rng = random.Random(7)
    for rank in range(12):
        write_profile(ddp_rank(rank, 9, rng), tmp_path, "job")
    return tmp_path


def test_many_ranks_print_one_merged_tree_and_the_outliers(twelve_ranks, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    assert main(["report", str(twelve_ranks)]) == 0
    out = capsys.readouterr().out
    assert "job · 12 ranks · steps 10–11 · cross-rank tree (cpu_time_ns, inclusive)" in out
    assert out.count(" rank 0 (") == 0  # not every rank's own tree
    mlp = next(line for line in out.splitlines() if line.rstrip().endswith("blocks.0.mlp"))
    assert mlp.split()[5] == "9"  # % mean, mean (2 words), max (2 words), max rank
    assert "outlier ranks" in out
    row = next(line for line in out.splitlines() if line.startswith("│") and "compute" in line)
    assert row.split("│")[1].strip() == "9"
    assert "rank 9: +" in out and "forward › train.py:40 train › blocks.0.mlp" in out


def test_ranks_all_and_rank_keep_the_per_rank_report(twelve_ranks, capsys):
    assert main(["report", str(twelve_ranks), "--ranks", "all"]) == 0
    out = capsys.readouterr().out
    assert "cross-rank" not in out and all(f"job rank {r} (n{r // 4})" in out for r in range(12))
    assert main(["report", str(twelve_ranks), "--rank", "3"]) == 0
    out = capsys.readouterr().out
    assert "job rank 3 (n0)" in out and "job rank 4" not in out and "cross-rank" not in out


def test_json_gains_merged_and_keeps_its_keys(twelve_ranks, capsys):
    assert main(["report", str(twelve_ranks), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"version", "profiles", "errors", "merged"} and doc["profiles"] == []
    (merged,) = doc["merged"]
    assert merged["run"] == "job" and merged["ranks"] == list(range(12))
    assert [o["rank"] for o in merged["outliers"]] == [9]
    assert merged["outliers"][0]["measure"] in ("compute", "phase forward")
    assert main(["report", str(twelve_ranks), "--json", "--ranks", "all"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "merged" not in doc and len(doc["profiles"]) == 12


def test_few_ranks_keep_todays_report(tmp_path, capsys):
    rng = random.Random(2)
    for rank in range(4):
        write_profile(ddp_rank(rank, None, rng), tmp_path, "job")
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cross-rank" not in out and "step time per rank" in out


def write_windows(root, count=12, rise_from=6):
    """One rank, ``count`` windows of 2 steps; ``aten::cat`` grows from ``rise_from`` on."""
    rng = random.Random(4)
    for w in range(count):
        cat = 50_000 * (1 + max(0, w - rise_from + 1))
        mm = int(1_000_000 * rng.uniform(0.98, 1.02))
        tree = tree_from_lists(
            (
                "forward",
                (
                    "python:train|train.py:40",
                    f"aten::mm @cpu_time_ns={mm},count=2",
                    f"aten::cat @cpu_time_ns={cat},count=2",
                ),
            )
        )
        write_profile(
            Profile(tree=tree, steps=(100 * w, 100 * w + 2), step_times_ns=[1, 1]), root, "long"
        )


def test_trend_of_a_path_and_the_top_rising_node(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    write_windows(tmp_path)
    path = "forward › train.py:40 train › aten::cat"
    assert main(["report", str(tmp_path), "--trend", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["trend"]
    assert entry["run"] == "long" and entry["rank"] == 0 and doc["profiles"] == []
    trend = entry["trend"]
    assert trend["node"]["path"] == path.split(" › ")
    assert [p["steps"] for p in trend["points"]] == [[100 * w, 100 * w + 2] for w in range(12)]
    assert [p["value"] for p in trend["points"]] == [25_000.0] * 6 + [
        25_000.0 * k for k in range(2, 8)
    ]
    assert trend["mann_kendall"]["p"] < 0.01 and trend["first_rise_step"] == 600
    assert main(["report", str(tmp_path), "--trend", "top"]) == 0
    out = capsys.readouterr().out
    assert "long rank 0 · 12 windows from step" in out and "rising from step 600" in out
    assert out.count("trend of node") == 1 and "forward › train.py:40 train › aten::cat" in out


def test_trend_of_an_unknown_path_names_it(tmp_path, capsys):
    write_windows(tmp_path)
    assert main(["report", str(tmp_path), "--trend", "forward › train.py:40 train › aten::ca"]) == 2
    err = capsys.readouterr().err
    assert (
        "--trend 'forward › train.py:40 train › aten::ca': no such path" in err
        and "aten::cat" in err
    )
