"""Thicket export: a window's ranks written by the real writer, exported by the
CLI, opened with LLNL Thicket itself (`dc_core.export.thicket.load` and the
recipe in its docstring)."""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap
from pathlib import Path

import pytest

from dc_core.cli import main
from dc_core.export import exporter
from dc_core.export import thicket as thicket_export
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import read_profile, write_profile
from dc_core.store.profile import Profile

#: Exclusive ``aten::mm`` CPU time per rank: rank 2 is the straggler, 5x the others.
MM = {0: 100, 1: 100, 2: 500}
#: Only rank 1 ran the dataloader in this window.
FETCH_NS = 70


@pytest.fixture
def th():
    """LLNL Thicket, or the test is skipped."""
    return pytest.importorskip("thicket")


def rank_profile(rank: int, steps=(5, 8), device: bool = False) -> Profile:
    specs = [
        (
            "forward",
            (
                "python:step|train.py:3 @cpu_time_ns=10",
                f"aten::mm @cpu_time_ns={MM[rank]},count=3"
                + (",device_time_ns=9" if device else ""),
            ),
        )
    ]
    if rank == 1:
        specs.append(("dataloader", f"python:fetch|loader.py:9 @cpu_time_ns={FETCH_NS},count=1"))
    return Profile(
        tree=tree_from_lists(*specs),
        steps=steps,
        step_times_ns=[10, 20, 30],
        rank=rank,
        host=f"node-{'ab'[rank // 2]}",
        framework="torch",
        mode="lightweight",
        world_size=3,
    )


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Three ranks of run ``runA``'s window 5-7, and rank 0 alone in window 10-11."""
    for rank in MM:
        write_profile(rank_profile(rank), tmp_path / "logs", "runA")
    write_profile(rank_profile(0, steps=(10, 12)), tmp_path / "logs", "runA")
    return tmp_path / "logs"


def export_cli(logdir: Path, *extra: str) -> tuple[int, Path]:
    out = logdir.parent / "out"
    status = main(["export", str(logdir), "--format", "thicket", "--out", str(out), *extra])
    return status, out


@pytest.fixture
def window_file(logdir: Path) -> Path:
    status, out = export_cli(logdir)
    assert status == 0
    return out / "runA-steps5-7.thicket.json"


def per_rank(tk, name: str, column: str = "time") -> dict[int, float]:
    """``column`` of the node named ``name``, per rank (from the metadata's rank column)."""
    rows = tk.dataframe.loc[tk.get_node(name)][column]
    ranks = tk.metadata["rank"]
    return {int(ranks[profile]): value for profile, value in rows.items()}


def test_cli_writes_one_file_per_run_and_window_with_each_ranks_literal(logdir, capsys):
    status, out = export_cli(logdir)
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "runA-steps10-11.thicket.json",
        "runA-steps5-7.thicket.json",
    ]
    assert str(out / "runA-steps5-7.thicket.json") in capsys.readouterr().out
    doc = json.loads((out / "runA-steps5-7.thicket.json").read_bytes())
    assert (doc["format"], doc["version"], doc["run"], doc["steps"], doc["metric"]) == (
        "deepcontext-thicket",
        1,
        "runA",
        [5, 8],
        "cpu_time_ns",
    )
    assert [p["name"] for p in doc["profiles"]] == [
        "runA/0-node-a/steps-5-7",
        "runA/1-node-a/steps-5-7",
        "runA/2-node-b/steps-5-7",
    ]
    assert doc["profiles"][2]["metadata"] == {
        "run": "runA",
        "rank": 2,
        "host": "node-b",
        "framework": "torch",
        "mode": "lightweight",
        "world_size": 3,
        "steps": "5-7",
        "first_step": 5,
        "last_step": 7,
        "metric": "cpu_time_ns",
        "unit": "ns",
    }
    # Each rank's graph is exactly its --format hatchet export.
    source = read_profile(logdir / "runA/plugins/deepcontext/2-node-b/steps-5-7.pb")
    assert doc["profiles"][2]["graph"] == json.loads(exporter("hatchet")(source, "cpu_time_ns"))


def test_thicket_has_a_profile_and_a_metadata_row_per_rank(th, window_file):
    tk = thicket_export.load(window_file)
    assert isinstance(tk, th.Thicket)
    assert len(tk.profile) == 3 and len(tk.metadata) == 3
    assert sorted(tk.metadata["rank"]) == [0, 1, 2]
    by_rank = tk.metadata.set_index("rank")
    assert by_rank.loc[2, "host"] == "node-b" and by_rank.loc[0, "host"] == "node-a"
    assert set(by_rank["world_size"]) == {3} and set(by_rank["steps"]) == {"5-7"}
    assert set(by_rank["framework"]) == {"torch"} and set(by_rank["metric"]) == {"cpu_time_ns"}
    assert sorted(tk.profile_mapping.values()) == [
        f"runA/{r}-node-{'ab'[r // 2]}/steps-5-7" for r in MM
    ]


def test_per_rank_values_are_the_ones_written(th, window_file):
    tk = thicket_export.load(window_file)
    assert per_rank(tk, "aten::mm") == MM
    assert per_rank(tk, "aten::mm", "cpu_time_ns") == MM
    assert per_rank(tk, "aten::mm", "count") == {0: 3, 1: 3, 2: 3}
    assert per_rank(tk, "forward", "time (inc)") == {r: MM[r] + 10 for r in MM}


def test_union_tree_holds_the_node_only_one_rank_ran(th, window_file):
    tk = thicket_export.load(window_file)
    fetch = tk.get_node("loader.py:9 fetch")
    assert [n.frame["name"] for n in fetch.path()] == ["dataloader", "loader.py:9 fetch"]
    values = per_rank(tk, "loader.py:9 fetch")
    # Thicket's "absent"
    assert values[1] == FETCH_NS and math.isnan(values[0]) and math.isnan(values[2])
    names = {n.frame["name"] for n in tk.graph.traverse()}
    assert names == {"forward", "train.py:3 step", "aten::mm", "dataloader", "loader.py:9 fetch"}


# thicket's own groupby().agg(np.mean) under pandas 2
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_thickets_own_statistics(th, window_file):
    tk = thicket_export.load(window_file)
    th.stats.mean(tk, columns=["time"])
    th.stats.maximum(tk, columns=["time"])
    th.stats.minimum(tk, columns=["time (inc)"])
    stats = tk.statsframe.dataframe
    mm, forward, fetch = (tk.get_node(n) for n in ("aten::mm", "forward", "loader.py:9 fetch"))
    assert stats.loc[mm, "time_mean"] == pytest.approx(sum(MM.values()) / 3)
    assert stats.loc[mm, "time_max"] == 500
    assert stats.loc[forward, "time (inc)_min"] == 110
    assert stats.loc[fetch, "time_mean"] == FETCH_NS  # over the one rank that ran it (NaN skipped)


def test_the_docstring_recipe_builds_the_same_thicket(th, window_file):
    """The three lines documented for users without DeepContext, run as written."""
    import hatchet

    block = re.search(r"same in three lines.*?::\n\n(.*?)\n\n", thicket_export.__doc__, re.S).group(
        1
    )
    scope = {"json": json, "hatchet": hatchet, "thicket": th, "path": str(window_file)}
    exec(textwrap.dedent(block), scope)
    ours = thicket_export.load(window_file)
    recipe = scope["tk"]
    assert recipe.metadata.equals(ours.metadata)
    assert recipe.profile_mapping == ours.profile_mapping
    assert per_rank(recipe, "aten::mm") == per_rank(ours, "aten::mm") == MM


def test_one_window_metric_for_every_rank(th, tmp_path):
    """Device time on one rank makes it the window's metric; the others' "time" is 0, not CPU time."""
    write_profile(rank_profile(0), tmp_path / "logs", "r")
    write_profile(rank_profile(2, device=True), tmp_path / "logs", "r")
    status, out = export_cli(tmp_path / "logs")
    assert status == 0
    tk = thicket_export.load(out / "r-steps5-7.thicket.json")
    assert set(tk.metadata["metric"]) == {"device_time_ns"}
    assert per_rank(tk, "aten::mm") == {0: 0, 2: 9}


def test_a_rank_without_the_metric_is_named_and_the_others_exported(th, tmp_path, capsys):
    lacking = write_profile(rank_profile(0), tmp_path / "logs", "r")
    write_profile(rank_profile(2, device=True), tmp_path / "logs", "r")
    status, out = export_cli(tmp_path / "logs", "--metric", "device_time_ns")
    assert status == 1
    assert f"skipped {lacking}: it has no metric 'device_time_ns'" in capsys.readouterr().out
    tk = thicket_export.load(out / "r-steps5-7.thicket.json")
    assert list(tk.metadata["rank"]) == [2] and per_rank(tk, "aten::mm") == {2: 9}


def test_one_profile_exports_as_a_thicket_of_one(th, tmp_path):
    """`exporter` works for every format: one profile is a one-profile Thicket file."""
    path = tmp_path / "one.thicket.json"
    path.write_bytes(exporter("thicket")(rank_profile(1), "count"))
    tk = thicket_export.load(path)
    assert list(tk.metadata["rank"]) == [1] and set(tk.metadata["metric"]) == {"count"}
    assert per_rank(tk, "loader.py:9 fetch") == {1: 1}


def test_load_without_thicket_says_what_to_install(monkeypatch, tmp_path):
    path = tmp_path / "w.thicket.json"
    path.write_bytes(thicket_export.export(rank_profile(0)))
    monkeypatch.setitem(sys.modules, "thicket", None)  # import thicket then raises ImportError
    with pytest.raises(ImportError, match="pip install llnl-thicket"):
        thicket_export.load(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[]", "not a DeepContext Thicket file"),
        (b"{not json", "not JSON"),
        (
            json.dumps({"format": "deepcontext-thicket", "version": 2, "profiles": []}).encode(),
            "version 2 is newer",
        ),
        (
            json.dumps(
                {"format": "deepcontext-thicket", "version": 1, "profiles": [{"graph": []}]}
            ).encode(),
            "non-empty list of",
        ),
    ],
)
def test_load_names_a_file_it_cannot_read(th, tmp_path, content, message):
    path = tmp_path / "bad.thicket.json"
    path.write_bytes(content)
    with pytest.raises(thicket_export.ThicketFileError, match=message) as info:
        thicket_export.load(path)
    assert str(path) in str(info.value)


def test_the_cross_rank_tree_agrees_with_thicket_node_for_node(th, logdir, window_file):
    """The report's cross-rank statistics, checked against Thicket's own on
    the same ranks (Thicket skips a rank without the node; ours counts it 0,
    so those nodes are compared after ``fillna(0)``)."""
    from dc_core.ensemble import cross_rank
    from dc_core.store.logdir import find_profiles

    e, _ = cross_rank([f for f in find_profiles(logdir) if f.steps == (5, 8)])
    stats = e.stats("cpu_time_ns")
    tk = thicket_export.load(window_file)
    tk.dataframe = tk.dataframe.fillna(0)
    for fn in (th.stats.mean, th.stats.maximum, th.stats.minimum):
        fn(tk, columns=["time (inc)"])
    theirs = tk.statsframe.dataframe
    compared = 0
    for node in range(1, len(e)):
        label = e.node_frame(node).label()
        row = theirs.loc[tk.get_node(label)]
        assert (stats.mean[node], stats.max[node], stats.min[node]) == pytest.approx(
            (row["time (inc)_mean"], row["time (inc)_max"], row["time (inc)_min"])
        ), label
        compared += 1
    assert compared == len(e) - 1 == 5  # forward, step, mm, dataloader, fetch
