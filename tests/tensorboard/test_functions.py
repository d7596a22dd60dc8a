"""The pure functions behind the routes, without a server."""

from __future__ import annotations

import os

import pytest

from dc_core.model import views
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import browse, diff, params, source, tables
from dc_core.tensorboard.params import BadRequest, Ref
from dc_core.tensorboard.store import Index, ProfileStore

RECURSIVE = tree_from_lists(
    (
        "forward",
        (
            "python:f|/a.py:1 @cpu_time_ns=5",
            ("python:f|/a.py:1 @cpu_time_ns=7", "aten::mm @cpu_time_ns=11"),
            "aten::mm @cpu_time_ns=13",
        ),
    ),
    ("backward", ("python:g|/a.py:2", "aten::mm [backward] @cpu_time_ns=17")),
)


def index_of(tree, window=(0, 1)) -> Index:
    return Index(Profile(tree=tree, steps=window), Ref(".", 0, window))


def test_flat_agrees_with_views_flat_on_recursion():
    index = index_of(RECURSIVE)
    rows = {r["label"]: r for r in tables.flat(index, "cpu_time_ns", limit=100)["rows"]}
    for expected in views.flat(RECURSIVE):
        row = rows[expected.frame.label()]
        assert (
            row["excl"] == expected.excl
            and row["incl"] == expected.incl
            and row["nodes"] == expected.nodes
        )


def test_lazy_bottom_up_agrees_with_views_bottom_up():
    index = index_of(RECURSIVE)
    eager = views.bottom_up(RECURSIVE)
    top = {r["label"]: r for r in tables.bottom_up(index, [], "cpu_time_ns")["rows"]}
    mm = eager.find("aten::mm")
    assert top["aten::mm"]["excl"]["cpu_time_ns"] == eager.inclusive("cpu_time_ns")[mm] == 24
    callers = tables.bottom_up(index, [top["aten::mm"]["id"]], "cpu_time_ns")["rows"]
    expected = {
        eager.node_frame(k).label(): eager.inclusive("cpu_time_ns")[k] for k in eager.children(mm)
    }
    assert {r["label"]: r["incl"]["cpu_time_ns"] for r in callers} == expected == {"a.py:1 f": 24}
    deeper = tables.bottom_up(index, [top["aten::mm"]["id"], callers[0]["id"]], "cpu_time_ns")[
        "rows"
    ]
    assert {r["label"]: r["incl"]["cpu_time_ns"] for r in deeper} == {"a.py:1 f": 11, "forward": 13}


def test_union_matches_call_paths_and_keeps_a_ids():
    a = index_of(tree_from_lists(("forward", "aten::mm @cpu_time_ns=10")))
    b = index_of(
        tree_from_lists(("forward", "aten::mm @cpu_time_ns=4", "aten::add @cpu_time_ns=9")), (1, 2)
    )
    union = diff.build_union(a, b)
    mm = a.tree.find("forward", "aten::mm")
    assert union.values("cpu_time_ns", mm) == (10, 4)
    rows = diff.diff_children(union, [a.tree.find("forward")], "cpu_time_ns")["children"]["1"]
    assert [(r["label"], r["a"], r["b"], r["in_a"]) for r in rows] == [
        ("aten::add", 0, 9, False),
        ("aten::mm", 10, 4, True),
    ]
    # A path only B has is len(A) + its id in B, whatever was expanded before.
    add = b.tree.find("forward", "aten::add")
    assert rows[0]["id"] == len(a) + add and diff.union_size(union) == len(a) + len(b)
    assert diff.build_union(a, b).values("cpu_time_ns", len(a) + add) == (0, 9)
    with pytest.raises(params.NotFound):  # B's forward is A's node 1, not a node of its own
        diff.diff_children(union, [len(a) + b.tree.find("forward")], "cpu_time_ns")


def test_store_reloads_a_rewritten_window(tmp_path):
    profile = Profile(tree=tree_from_lists("forward @cpu_time_ns=1"), steps=(0, 1))
    path = write_profile(profile, tmp_path, "r")
    store = ProfileStore(tmp_path, listing_ttl_s=0)
    ref = Ref("r", 0, (0, 1))
    first = store.index(ref)
    assert store.index(ref) is first  # cached while the file is unchanged
    profile.tree.add(1, "cpu_time_ns", 41)
    write_profile(profile, tmp_path, "r")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert store.index(ref).incl("cpu_time_ns")[0] == 42


def test_listing_is_reused_within_its_ttl(tmp_path):
    now = [0.0]
    store = ProfileStore(tmp_path, listing_ttl_s=5, clock=lambda: now[0])
    assert store.files() == []
    write_profile(Profile(tree=tree_from_lists("forward"), steps=(0, 1)), tmp_path, "r")
    assert store.files() == []
    now[0] = 6.0
    assert [f.run for f in store.files()] == ["r"]


@pytest.mark.parametrize("run", ["..", "a/../b", "/abs", "a//b", "a\\b", "c:x"])
def test_run_names_that_could_escape_are_refused(run):
    with pytest.raises(BadRequest):
        params.run_name(run)


def test_source_refuses_symlinks_out_of_the_roots(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "secret.py").write_text("TOKEN = 1\n")
    (root / "link.py").symlink_to(outside / "secret.py")
    (root / "ok.py").write_text("a = 1\nb = 2\n")
    roots = source.allowed_roots(env={}, cwd=str(root))
    assert not source.snippet(str(root / "link.py"), 1, roots)["available"]
    assert source.snippet("ok.py", 2, roots)["lines"] == ["a = 1", "b = 2"]
    extra = source.allowed_roots(env={source.ROOTS_ENV: str(outside)}, cwd=str(root))
    assert source.snippet(str(root / "link.py"), 1, extra)["lines"] == ["TOKEN = 1"]


COMPILED = tree_from_lists(
    (
        "forward",
        (
            "python:train_step|/t.py:9",
            (
                "compiled:graph_0",
                "aten::mm @cpu_time_ns=10",
                ("aten::add @cpu_time_ns=2", "kernel:add @device_time_ns=3"),
            ),
        ),
    ),
    (
        "backward",
        ("python:train_step|/t.py:9", ("compiled:graph_0", "aten::mm [backward] @cpu_time_ns=25")),
    ),
)


def test_compiled_region_is_a_context_in_the_phase_split():
    """A torch.compile graph pairs its forward and backward cost as a module
    does: the tab's context kinds are `dc_core.model.kinds.CONTEXT_KINDS`."""
    index = index_of(COMPILED)
    node = COMPILED.find("backward", "train_step", "graph_0", "aten::mm")
    split = browse.phase_split(index, node)
    assert split["context"] == "graph_0"
    assert split["context_node"] == COMPILED.find("backward", "train_step", "graph_0")
    assert {p["phase"]: p["incl"]["cpu_time_ns"] for p in split["phases"]} == {
        "forward": 12,
        "backward": 25,
    }
    assert [p["nodes"] for p in split["phases"]] == [
        [COMPILED.find("forward", "train_step", "graph_0")],
        [split["context_node"]],
    ]


def test_tab_and_analyzer_agree_on_each_nodes_context():
    """The tab's split context of an operator is the analyzer's anchor: the
    nearest Python line, module or compiled region above it."""
    from dc_core.analyzer.base import Window
    from dc_core.analyzer.thresholds import Thresholds

    window = Window(Profile(tree=COMPILED, steps=(0, 1)), Thresholds())
    index = index_of(COMPILED)
    operators = [
        n for n in range(1, len(COMPILED)) if COMPILED.node_frame(n).kind in ("operator", "kernel")
    ]
    assert len(operators) == 4
    for node in operators:
        assert browse.phase_split(index, node)["context_node"] == window.anchor(node)
        assert COMPILED.node_frame(window.anchor(node)).kind == "compiled"


def test_bottom_up_top_level_sorts_by_name_or_by_the_modes_value():
    index = index_of(RECURSIVE)
    by_name = [r["label"] for r in tables.bottom_up(index, [], "cpu_time_ns", sort="name")["rows"]]
    assert by_name == sorted(by_name, key=str.lower)
    by_self = tables.bottom_up(index, [], "cpu_time_ns", mode="excl")["rows"]
    assert [r["label"] for r in by_self][:2] == ["aten::mm", "aten::mm [backward]"]
    by_total = tables.bottom_up(index, [], "cpu_time_ns", mode="incl")["rows"]
    assert by_total[0]["label"] == "forward" and by_total[0]["incl"]["cpu_time_ns"] == 36
