"""Tree model, views and processors on literal trees."""

from __future__ import annotations

from dc_core.model.processors import (
    collapse_recursion,
    filter_kinds,
    merge,
    merge_ranks,
    prune_small,
)
from dc_core.model.tree import Frame, tree_from_lists
from dc_core.model.views import bottom_up, flat, view


def sample():
    return tree_from_lists(
        (
            "forward",
            (
                "python:train|train.py:10",
                (
                    "module:blocks.0 @cpu_time_ns=5",
                    "aten::mm @cpu_time_ns=100,count=2",
                    "aten::softmax @cpu_time_ns=30,count=2",
                ),
                "aten::mm @cpu_time_ns=50,count=1",
            ),
        ),
        ("backward", ("python:train|train.py:10", "aten::mm [backward] @cpu_time_ns=200,count=2")),
    )


def test_shorthand_builds_kinds_and_metrics():
    tree = sample()
    node = tree.find("forward", "train", "blocks.0", "aten::mm")
    assert tree.node_frame(node) == Frame("operator", "aten::mm")
    assert tree.value(node, "count") == 2
    train = tree.node_frame(tree.find("forward", "train"))
    assert (train.kind, train.file, train.line) == ("python", "train.py", 10)
    bwd = tree.node_frame(tree.find("backward", "train", "aten::mm [backward]"))
    assert bwd.backward and bwd.label() == "aten::mm [backward]"


def test_inclusive_is_derived_exclusive_untouched():
    tree = sample()
    incl = tree.inclusive("cpu_time_ns")
    assert incl[0] == 385
    assert incl[tree.find("forward")] == 185
    assert incl[tree.find("forward", "train", "blocks.0")] == 135
    assert tree.value(tree.find("forward", "train", "blocks.0"), "cpu_time_ns") == 5


def test_bottom_up_lists_callers_with_self_cost():
    up = bottom_up(sample())
    mm = up.find("aten::mm")
    assert up.inclusive("cpu_time_ns")[mm] == 150  # forward mm only; backward mm is another frame
    callers = {up.node_frame(k).name: up.inclusive("cpu_time_ns")[k] for k in up.children(mm)}
    assert callers == {"blocks.0": 100, "train": 50}


def test_bottom_up_selected_frames_use_inclusive_cost():
    up = bottom_up(sample(), "incl", ["module"])
    assert up.inclusive("cpu_time_ns")[up.find("blocks.0")] == 135


def test_flat_counts_recursion_once():
    tree = tree_from_lists(
        (
            "python:f|a.py:1 @cpu_time_ns=1",
            ("python:f|a.py:1 @cpu_time_ns=2", "aten::add @cpu_time_ns=4"),
        )
    )
    rows = {r.frame.name: r for r in flat(tree)}
    assert rows["f"].excl["cpu_time_ns"] == 3
    assert rows["f"].incl["cpu_time_ns"] == 7  # not 7 + 6
    assert collapse_recursion(tree).inclusive("cpu_time_ns")[0] == 7
    assert len(collapse_recursion(tree)) == 3


def test_prune_small_keeps_totals():
    tree = sample()
    pruned = prune_small(tree, "cpu_time_ns", min_fraction=0.1)
    assert pruned.inclusive("cpu_time_ns")[0] == 385
    assert pruned.find("forward", "train", "blocks.0", "aten::softmax") is None
    assert pruned.value(pruned.find("forward", "train", "blocks.0"), "cpu_time_ns") == 35


def test_merge_sums_same_paths_and_ranks_split():
    a, b = sample(), sample()
    merged = merge([a, b])
    assert len(merged) == len(a)
    assert merged.inclusive("count")[0] == 2 * a.inclusive("count")[0]
    by_rank = merge_ranks([a, b], ranks=[0, 1])
    assert by_rank.find("rank 1", "forward", "train", "blocks.0", "aten::mm") is not None


def test_filter_kinds_splices_children():
    tree = filter_kinds(sample(), ["module"])
    node = tree.find("forward", "train", "aten::mm")
    assert tree.value(node, "cpu_time_ns") == 150
    assert tree.value(tree.find("forward", "train"), "cpu_time_ns") == 5


def test_flat_view_is_one_level_of_frames_with_their_own_cost():
    shown = view(sample(), "flat")
    flat_tree = shown.tree
    assert {
        flat_tree.node_frame(k).label(): shown.excl["cpu_time_ns"][k] for k in flat_tree.children(0)
    } == {
        "forward": 0,
        "train.py:10 train": 0,
        "blocks.0": 5,
        "aten::mm": 150,
        "aten::softmax": 30,
        "backward": 0,
        "aten::mm [backward]": 200,
    }
