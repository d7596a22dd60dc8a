"""The "All ranks" and "Windows" views: their pure functions on a planted
3-rank window (rank 2's ``aten::mm`` costs 5x), then their routes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dc_core.ensemble import merge
from dc_core.model.tree import Frame, tree_from_lists
from dc_core.store.logdir import find_profiles, write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import spread, windows
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import ProfileStore
from tests.tensorboard.conftest import Api

MM = ["forward", "t.py:3 step", "aten::mm"]


def planted(rank: int, mm: int, steps=(5, 7), extra: bool = False) -> Profile:
    """forward (10) › t.py:3 step › aten::mm (``mm``); ``aten::nonzero`` (40) where ``extra``."""
    kids = [("python:step|t.py:3", f"aten::mm @cpu_time_ns={mm},count=2")]
    if extra:
        kids.append("aten::nonzero @cpu_time_ns=40,count=1")
    return Profile(
        tree=tree_from_lists(("forward @cpu_time_ns=10", *kids)),
        steps=steps,
        step_times_ns=[1000, 1000],
        rank=rank,
        host=f"h{rank}",
    )


@pytest.fixture
def ranks_logdir(tmp_path: Path) -> Path:
    """Window 5-7 on ranks 0, 1, 2 (mm 100, 100, 500; rank 1 also calls nonzero),
    and rank 0's later windows 7-9 and 9-11 (mm 200 and 300)."""
    root = tmp_path / "ranks"
    for rank, mm in enumerate((100, 100, 500)):
        write_profile(planted(rank, mm, extra=rank == 1), root, "job")
    for steps, mm in (((7, 9), 200), ((9, 11), 300)):
        write_profile(planted(0, mm, steps), root, "job")
    return root


def window_ensemble(logdir: Path):
    e, errors = merge([f for f in find_profiles(logdir) if f.steps == (5, 7)])
    assert not errors
    return e


def test_spread_of_a_node_over_ranks_is_exact(ranks_logdir):
    e = window_ensemble(ranks_logdir)
    row = spread.spread_row(e, e.find(MM), "cpu_time_ns")
    assert (
        row["label"],
        row["max"],
        row["min"],
        row["max_rank"],
        row["max_host"],
        row["present"],
    ) == ("aten::mm", 500, 100, 2, "h2", 3)
    assert row["mean"] == pytest.approx(700 / 3) and row["sum"] == 700
    assert row["imbalance"] == pytest.approx((500 - 700 / 3) / 500)
    nonzero = spread.spread_row(e, e.find(["forward", "aten::nonzero"]), "cpu_time_ns")
    assert (nonzero["mean"], nonzero["max"], nonzero["max_rank"], nonzero["present"]) == (
        40 / 3,
        40,
        1,
        1,
    )
    assert nonzero["imbalance"] == pytest.approx(2 / 3)
    root = spread.spread_row(e, 0, "cpu_time_ns")
    assert (
        root["label"] == "steps 5\u20136, 3 ranks" and root["max"] == 510 and root["max_rank"] == 2
    )


def test_hot_path_follows_the_largest_mean_and_sorts_children(ranks_logdir):
    e = window_ensemble(ranks_logdir)
    hot = spread.spread_hot_path(e, "cpu_time_ns", threshold=0.01)
    assert hot["chain"] == [0, e.find(["forward"]), e.find(MM[:2]), e.find(MM)]
    assert hot["ranks"] == [0, 1, 2] and hot["total"] == pytest.approx((110 + 150 + 510) / 3)
    forward_kids = hot["children"][str(e.find(["forward"]))]
    assert [r["label"] for r in forward_kids] == ["t.py:3 step", "aten::nonzero"]  # mean 233 > 13
    by_imbalance = spread.spread_children(e, [e.find(["forward"])], "cpu_time_ns", sort="imbalance")
    assert [r["label"] for r in by_imbalance["children"][str(e.find(["forward"]))]] == [
        "aten::nonzero",
        "t.py:3 step",
    ]


def test_distribution_bins_are_exact(ranks_logdir):
    e = window_ensemble(ranks_logdir)
    mm = e.find(MM)
    d = spread.distribution(e, mm, "cpu_time_ns")
    assert (
        d["values"] == [100, 100, 500]
        and d["ranks"] == [0, 1, 2]
        and d["hosts"] == ["h0", "h1", "h2"]
    )
    # three ranks: three bins; the top one holds 500
    assert [(b["lo"], b["hi"], b["count"]) for b in d["bins"]] == [
        (100, pytest.approx(700 / 3), 2),
        (pytest.approx(700 / 3), pytest.approx(1100 / 3), 0),
        (pytest.approx(1100 / 3), 500, 1),
    ]
    two = spread.distribution(e, mm, "cpu_time_ns", bins=2)
    assert [(b["lo"], b["hi"], b["count"]) for b in two["bins"]] == [(100, 300, 2), (300, 500, 1)]
    assert [p["label"] for p in d["path"]] == MM
    same = spread.distribution(e, e.find(MM[:2]), "count")  # 2 calls on every rank: one bin
    assert same["bins"] == [{"lo": 2, "hi": 2, "count": 3}]


def test_locate_maps_a_path_by_frames_into_one_ranks_tree(ranks_logdir):
    e = window_ensemble(ranks_logdir)
    store = ProfileStore(ranks_logdir, listing_ttl_s=0)
    rank2 = store.index(Ref("job", 2, (5, 7)))
    found = spread.locate(rank2, spread.ensemble_path(e, e.find(MM)))
    assert found["exact"] and found["node"] == rank2.tree.find("forward", "t.py:3 step", "aten::mm")
    assert found["path"] == rank2.tree.path(found["node"]) and found["rank"] == 2
    missing = spread.locate(rank2, spread.ensemble_path(e, e.find(["forward", "aten::nonzero"])))
    # the deepest it has
    assert not missing["exact"] and missing["node"] == rank2.tree.find("forward")


def test_windows_series_of_one_rank_is_exact(ranks_logdir):
    files = sorted((f for f in find_profiles(ranks_logdir) if f.rank == 0), key=lambda f: f.steps)
    e, _ = merge(files)
    frames = [
        Frame("phase", "forward"),
        Frame("python", "step", "t.py", 3),
        Frame("operator", "aten::mm"),
    ]
    series = windows.windows_series(e, frames, "cpu_time_ns")
    assert series["found"] and series["path"] == MM
    assert [(w["window"], w["label"], w["value"], w["total"]) for w in series["windows"]] == [
        ("5-7", "steps 5\u20136", 100, 110),
        ("7-9", "steps 7\u20138", 200, 210),
        ("9-11", "steps 9\u201310", 300, 310),
    ]
    assert [w["share"] for w in series["windows"]] == [100 / 110, 200 / 210, 300 / 310]
    gone = windows.windows_series(
        e, [Frame("phase", "forward"), Frame("operator", "aten::nonzero")], "cpu_time_ns"
    )
    assert not gone["found"] and [w["value"] for w in gone["windows"]] == [0, 0, 0]


# --- routes ---------------------------------------------------------------------


@pytest.fixture
def ranks_api(ranks_logdir: Path) -> Api:
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin

    return Api(
        DeepContextPlugin(
            TBContext(logdir=str(ranks_logdir)), store=ProfileStore(ranks_logdir, listing_ttl_s=0)
        )
    )


W = {"run": "job", "window": "5-7", "metric": "cpu_time_ns"}


def test_all_ranks_routes_open_the_hot_path_and_show_a_distribution(ranks_api: Api):
    hot = ranks_api.json("/allranks", **W, threshold=0.01)
    rows = {r["label"]: r for rows in hot["children"].values() for r in rows}
    mm = rows["aten::mm"]
    assert (mm["max"], mm["max_rank"], mm["mean"]) == (500, 2, pytest.approx(700 / 3))
    assert hot["chain"][-1] == mm["id"] and hot["root"]["label"] == "steps 5\u20136, 3 ranks"
    kids = ranks_api.json("/allranks/children", **W, node=rows["forward"]["id"], sort="max")
    assert [r["label"] for r in kids["children"][str(rows["forward"]["id"])]] == [
        "t.py:3 step",
        "aten::nonzero",
    ]
    d = ranks_api.json("/allranks/node", **W, node=mm["id"])
    assert d["values"] == [100, 100, 500] and [b["count"] for b in d["bins"]] == [2, 0, 1]
    jump = ranks_api.json("/allranks/locate", **W, node=mm["id"], rank=d["node"]["max_rank"])
    assert jump["exact"] and jump["rank"] == 2
    node = ranks_api.json(
        "/node", run="job", rank=2, window="5-7", node=jump["node"], metric="cpu_time_ns"
    )
    assert [p["label"] for p in node["path"]] == MM and node["node"]["incl"]["cpu_time_ns"] == 500


def test_all_ranks_search_finds_nodes_of_the_merged_tree(ranks_api: Api):
    hot = ranks_api.json("/allranks", **W, threshold=0.01)
    rows = {r["label"]: r for rows in hot["children"].values() for r in rows}
    found = ranks_api.json("/allranks/search", **W, q="NONZERO")
    # aten::nonzero ran on one rank only: it is in the merged tree, its mean over all three ranks
    assert found["count"] == 1 and [m["label"] for m in found["matches"]] == ["aten::nonzero"]
    (match,) = found["matches"]
    assert match["path"][0] == rows["forward"]["id"] and match["path"][-1] == match["id"]
    assert match["incl"] == pytest.approx(40 / 3)
    mm = ranks_api.json("/allranks/search", **W, q="aten::mm")["matches"][0]
    assert mm["id"] == rows["aten::mm"]["id"] and mm["incl"] == pytest.approx(700 / 3)
    assert ranks_api.json("/allranks/search", **W, q="no such frame")["matches"] == []


def test_windows_route_from_a_rank_node_and_from_an_all_ranks_node(ranks_api: Api):
    hot = ranks_api.json("/allranks", **W, threshold=0.01)
    series = ranks_api.json("/windows", **W, rank=0, node=hot["chain"][-1], **{"from": "all"})
    assert series["rank"] == 0 and [w["value"] for w in series["windows"]] == [100, 200, 300]
    mine = ranks_api.json("/search", run="job", rank=0, window="9-11", q="aten::mm")["matches"][0][
        "id"
    ]
    again = ranks_api.json(
        "/windows", run="job", rank=0, window="9-11", node=mine, metric="cpu_time_ns"
    )
    assert again["windows"] == series["windows"] and again["path"] == MM


def test_all_ranks_needs_two_ranks_and_bad_parameters_are_400(ranks_api: Api):
    assert "two" in ranks_api.json("/allranks", status=404, run="job", window="7-9")["error"]
    ranks_api.json("/allranks", status=400, run="../job", window="5-7")
    ranks_api.json("/allranks/children", status=400, **W, node="99")
    ranks_api.json("/allranks/node", status=400, **W, node=1, bins=0)
    ranks_api.json("/allranks", status=400, **W, sort="rank; drop")
    ranks_api.json("/windows", status=400, **W, rank=0, node=1, **{"from": "elsewhere"})


def test_merged_ranks_are_cached_until_a_file_changes(ranks_logdir):
    store = ProfileStore(ranks_logdir, listing_ttl_s=0)
    first = store.cross_rank("job", (5, 7)).ensemble
    assert store.cross_rank("job", (5, 7)).ensemble is first
    path = write_profile(planted(1, 900), ranks_logdir, "job")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    again = store.cross_rank("job", (5, 7)).ensemble
    assert again is not first and again.values("cpu_time_ns", again.find(MM)).tolist() == [
        100,
        900,
        500,
    ]


def test_an_unreadable_rank_is_left_out_and_named(ranks_api: Api, ranks_logdir):
    bad = ranks_logdir / "job" / "plugins" / "deepcontext" / "3-h3" / "steps-5-6.pb"
    bad.parent.mkdir()
    bad.write_bytes(b"\x08\x99garbage")
    hot = ranks_api.json("/allranks", **W)
    assert hot["ranks"] == [0, 1, 2] and list(hot["errors"]) == [
        "job/plugins/deepcontext/3-h3/steps-5-6.pb"
    ]
    assert "job/plugins/deepcontext/3-h3/steps-5-6.pb" in ranks_api.json("/runs")["errors"]
    assert str(ranks_logdir) not in str(ranks_api.json("/runs")["errors"])


def test_a_window_no_rank_of_which_can_be_read_is_422(ranks_api: Api, ranks_logdir):
    for rank in (1, 2):
        (
            ranks_logdir / "job" / "plugins" / "deepcontext" / f"{rank}-h{rank}" / "steps-5-6.pb"
        ).write_bytes(b"junk")
    (ranks_logdir / "job" / "plugins" / "deepcontext" / "0-h0" / "steps-5-6.pb").write_bytes(
        b"\x08\x99garbage"
    )
    body = ranks_api.json("/allranks", status=422, **W)
    assert (
        body["error"].startswith("job/plugins/deepcontext/")
        and str(ranks_logdir) not in body["error"]
    )
