"""Real DDP on CPU processes (gloo): Lightning with two ranks (both write, the
report merges them), plain PyTorch with nine (the cross-rank report names the
slow rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from dc_core.cli.present import rank_step_stats, rank_top_frames
from dc_core.model.comm import END_OF_BACKWARD
from dc_core.store.logdir import load_profiles

SCRIPT = Path(__file__).with_name("ddp_fit.py")


@pytest.mark.slow
def test_two_ranks_write_and_merge_with_collectives(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("DEEPCONTEXT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plugin = tmp_path / "lightning_logs" / "version_0" / "plugins" / "deepcontext"
    assert sorted(d.name.split("-")[0] for d in plugin.iterdir()) == ["0", "1"]
    profiles, errors = load_profiles(tmp_path)
    assert errors == [] and sorted(p.rank for p in profiles) == [0, 1]
    assert all(
        p.steps == (2, 5) and len(p.step_times_ns) == 3 and p.world_size == 2 for p in profiles
    )
    stats = rank_step_stats(profiles)
    assert [s.rank for s in stats] == [0, 1] and all(
        s.max_ns >= s.p95_ns >= s.median_ns > 0 for s in stats
    )
    for p in profiles:
        # DDP's bucketed all-reduce (one bucket), in the backward pass under the
        # module whose gradients completed the bucket, with its time
        tree = p.tree
        (reduce,) = tree.find_all(
            lambda f: f.name == "c10d::allreduce_" and f.backward and f.detail != END_OF_BACKWARD
        )
        path = tree.path_frames(reduce)
        assert path[0].name == "backward" and path[-2].kind == "module", path
        assert tree.value(reduce, "count") == 3 and tree.value(reduce, "cpu_time_ns") > 0
        assert tree.value(reduce, "comm_time_ns") > 0  # launch to completion, from the future
        # the reducer's wait for it when backward ends, once a step, beside it
        (wait,) = tree.find_all(lambda f: f.detail == END_OF_BACKWARD)
        assert tree.parent[wait] == tree.parent[reduce]
        assert tree.value(wait, "count") == 3 and tree.value(wait, "exposed_comm_ns") > 0
    ranks, rows = rank_top_frames(profiles, "cpu_time_ns", limit=50)
    assert ranks == [0, 1]
    (row,) = [
        values for frame, values in rows if frame.name == "c10d::allreduce_" and not frame.detail
    ]
    assert all(v > 0 for v in row)
    report = subprocess.run(
        [sys.executable, "-m", "dc_core", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "COLUMNS": "200"},
    )
    assert report.returncode == 0 and "slowest rank:" in report.stdout


RANKS_SCRIPT = Path(__file__).with_name("ddp_ranks.py")


@pytest.mark.slow
def test_nine_real_ranks_name_the_slow_one_not_those_waiting_for_it(tmp_path):
    """Plain DDP on 9 CPU processes (gloo), rank 5 running its MLP 16 times on
    a batch 16 times larger: the others wait for it after their backward
    pass, outside any collective's scope, which must not make them look
    slow: rank 5 is the top outlier."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("DEEPCONTEXT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, str(RANKS_SCRIPT), str(tmp_path), "9", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "dc_core", "report", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    (merged,) = json.loads(report.stdout)["merged"]
    assert merged["ranks"] == list(range(9))
    slow, *others = merged["outliers"]
    assert slow["rank"] == 5, merged["outliers"]
    assert slow["measure"] in ("compute", "phase forward", "phase backward") and slow["ratio"] > 2
    # On a loaded host one more rank may stand out by a little (9 processes share 2 cores); never by as much.
    assert all(o["ratio"] < slow["ratio"] / 2 for o in others), merged["outliers"]
    assert any(label.startswith("module.0.mlp") for label in slow["node"]["path"]), slow["node"][
        "path"
    ]
