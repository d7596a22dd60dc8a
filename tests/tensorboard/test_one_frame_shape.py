"""One frame, one JSON shape (`frame_json`) in the report, the cross-rank
tree and the tab's rows; one hot-path walk (`views.hot_chain`) under the
tab's tree and its all-ranks tree."""

from __future__ import annotations

from dc_core.cli.present import node_json
from dc_core.ensemble import merge
from dc_core.ensemble.rows import merged_json
from dc_core.model import views
from dc_core.model.tree import Frame, frame_json, tree_from_lists
from dc_core.store.logdir import find_profiles, write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import spread, tables
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import Index

FRAME = Frame("python", "step", "/src/t.py", 12, "Trainer", backward=True)


def _tree():
    tree = tree_from_lists(
        ("forward @cpu_time_ns=10", "aten::mm @cpu_time_ns=50"), "aten::add @cpu_time_ns=5"
    )
    node = tree.child(tree.find("forward"), FRAME)
    tree.add(node, "cpu_time_ns", 30)
    return tree


def _ensemble(tmp_path, tree):
    profile = Profile(tree=tree, steps=(5, 7), step_times_ns=[60, 60], rank=0, host="h0")
    write_profile(profile, tmp_path, "job")
    ensemble, errors = merge(find_profiles(tmp_path))
    assert not errors
    return ensemble


def test_frame_json_is_the_schema_shape():
    assert list(frame_json(FRAME)) == ["kind", "name", "detail", "file", "line", "backward"]
    assert frame_json(FRAME) == {
        "kind": "python",
        "name": "step",
        "detail": "Trainer",
        "file": "/src/t.py",
        "line": 12,
        "backward": True,
    }


def _find(item: dict, name: str) -> dict:
    stack = [item]
    while stack:
        item = stack.pop()
        if item["name"] == name:
            return item
        stack.extend(item["children"])
    raise AssertionError(name)


def test_every_reader_shows_a_frame_as_frame_json(tmp_path):
    tree = _tree()
    expected = frame_json(FRAME)
    report = _find(node_json(views.view(tree)), "step")
    assert {k: report[k] for k in expected} == expected
    assert set(report) == {*expected, "excl", "incl", "children"}
    ensemble = _ensemble(tmp_path, tree)
    merged = _find(merged_json(ensemble)["tree"], "step")
    assert {k: merged[k] for k in expected} == expected
    assert set(merged) == {"id", *expected, "stats", "children"}
    row = spread.spread_row(ensemble, ensemble.find(["forward", FRAME.label()]), "cpu_time_ns")
    assert {k: row[k] for k in expected} == expected and row["label"] == FRAME.label()
    index = Index(Profile(tree=tree, steps=(5, 7)), Ref(".", 0, (5, 7)))
    fields = tables.frame_fields(index, tree.frames.index(FRAME))
    assert fields == {**expected, "label": FRAME.label()}


def test_hot_chain_takes_the_heaviest_child_while_it_holds_the_floor():
    tree = tree_from_lists(("a @count=1", ("b", "c @count=6"), "d @count=6"), "e @count=2")
    incl = tree.inclusive("count")
    a, b, c, d = (tree.find(*p) for p in (["a"], ["a", "b"], ["a", "b", "c"], ["a", "d"]))
    assert b < d
    # b and d tie: the lower id goes on.
    assert views.hot_chain(0, tree.children, incl.__getitem__, 0) == [0, a, b, c]
    assert views.hot_chain(0, tree.children, incl.__getitem__, 7) == [0, a]  # b holds 6 < 7
    assert views.hot_chain(a, tree.children, incl.__getitem__, 0, depth=2) == [a, b]
    assert views.hot_chain(0, tree.children, lambda node: 0, 0) == [0]  # nothing above 0


def test_both_hot_paths_walk_alike(tmp_path):
    tree = _tree()
    index = Index(Profile(tree=tree, steps=(5, 7)), Ref(".", 0, (5, 7)))
    ensemble = _ensemble(tmp_path, tree)
    one = tables.hot_path(index, 0, "cpu_time_ns", threshold=0.05)
    merged = spread.spread_hot_path(ensemble, "cpu_time_ns", threshold=0.05)
    labels = [tree.node_frame(n).label() for n in one["chain"]]
    assert labels == ["root", "forward", "aten::mm"]
    assert [ensemble.node_frame(n).label() for n in merged["chain"]] == labels
