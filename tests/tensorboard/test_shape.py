"""The tab's numpy passes (`shape`) and lazy diff against the model's own
loops, on random trees with recursion: the fast paths must give the same
numbers as the one definition they stand in for."""

from __future__ import annotations

import random

import pytest

from dc_core.model import views
from dc_core.model.tree import Frame, Tree, tree_from_lists
from dc_core.store.profile import Profile
from dc_core.tensorboard import browse, diff, shape, tables
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import Index

FRAMES = [
    Frame("phase", "forward"),
    Frame("phase", "backward"),
    Frame("python", "f", "/a.py", 1),
    Frame("python", "g", "/a.py", 2),
    Frame("module", "m", detail="M"),
    Frame("module", "m", detail="M", backward=True),
    Frame("operator", "aten::mm"),
    Frame("operator", "aten::mm", backward=True),
    Frame("kernel", "k"),
    Frame("compiled", "graph_0"),
]


def random_tree(seed: int, paths: int = 400) -> Tree:
    """Random call paths over few frames: recursion (a frame under itself),
    context frames under operators, backward twins of context frames."""
    rng = random.Random(seed)
    tree = Tree()
    for _ in range(paths):
        node = 0
        for _ in range(rng.randint(1, 9)):
            node = tree.child(node, rng.choice(FRAMES))
        for metric in ("cpu_time_ns", "count"):
            tree.add(node, metric, rng.randint(0, 1000))
        if rng.random() < 0.3:
            tree.add(tree.parent[node], "cpu_time_ns", rng.randint(0, 50))
    return tree


def index_of(tree: Tree, window=(0, 1)) -> Index:
    return Index(Profile(tree=tree, steps=window), Ref(".", 0, window))


@pytest.mark.parametrize("seed", range(6))
def test_numpy_passes_agree_with_the_models_loops(seed):
    tree = random_tree(seed)
    index = index_of(tree)
    assert index.levels().levels is not None
    for metric in tree.excl:
        assert index.incl(metric) == tree.inclusive(metric)
        assert index.total(metric) == tree.inclusive(metric)[0]
    assert tables._nested(index) == views.nested(tree)
    fast, slow = tables._flat_totals(index), views.flat_totals(tree)
    assert (fast.nodes, fast.excl, fast.incl) == (slow.nodes, slow.excl, slow.incl)


@pytest.mark.parametrize("seed", range(6))
def test_context_ids_by_level_and_by_loop_make_the_same_groups(seed, monkeypatch):
    tree = random_tree(seed)
    by_level, phase_level = browse._context_ids(index_of(tree))
    monkeypatch.setattr(shape, "MAX_LEVELS", 1)  # every tree is "too deep": the loop runs
    loop_index = index_of(tree)
    assert loop_index.levels().levels is None
    by_loop, phase_loop = browse._context_ids(loop_index)
    assert phase_level.tolist() == phase_loop.tolist()
    pairs = set(zip(by_level.tolist(), by_loop.tolist()))
    assert len(pairs) == len(set(by_level.tolist())) == len(set(by_loop.tolist()))  # one-to-one
    assert (0, 0) in pairs and all((a == 0) == (b == 0) for a, b in pairs)


def test_a_backward_context_frame_pairs_with_its_forward_twin():
    tree = tree_from_lists(
        ("forward", ("module:m", "aten::mm @cpu_time_ns=3")),
        ("backward", ("module:m [backward]", "aten::mm [backward] @cpu_time_ns=5")),
    )
    split = browse.phase_split(
        index_of(tree), tree.find("backward", "m [backward]", "aten::mm [backward]")
    )
    assert {p["phase"]: p["incl"]["cpu_time_ns"] for p in split["phases"]} == {
        "forward": 3,
        "backward": 5,
    }


def test_too_deep_trees_take_the_models_loops(monkeypatch):
    monkeypatch.setattr(shape, "MAX_LEVELS", 3)
    tree = random_tree(0)
    index = index_of(tree)
    assert index.levels().levels is None
    assert index.incl("cpu_time_ns") == tree.inclusive("cpu_time_ns")
    assert tables._flat_totals(index).incl == views.flat_totals(tree).incl


def _by_path(tree: Tree, metric: str) -> dict[tuple, int]:
    incl = tree.inclusive(metric)
    return {tuple(tree.path_frames(n)): incl[n] for n in range(1, len(tree))}


@pytest.mark.parametrize("seed", range(4))
def test_lazy_union_matches_every_path_of_both_trees(seed):
    a, b = random_tree(seed, 150), random_tree(seed + 100, 150)
    union = diff.build_union(index_of(a), index_of(b, (1, 2)))
    in_a, in_b = _by_path(a, "cpu_time_ns"), _by_path(b, "cpu_time_ns")
    seen = {}
    stack = [(0, ())]
    while stack:  # every union node, reached as the table reaches them: children of opened rows
        node, path = stack.pop()
        for kid in union.children(node):
            kid_path = path + (union.frame(kid),)
            seen[kid_path] = union.values("cpu_time_ns", kid)
            assert (kid < len(a)) == (kid_path in in_a)
            stack.append((kid, kid_path))
    assert set(seen) == set(in_a) | set(in_b)  # each path once, none missing
    assert seen == {p: (in_a.get(p, 0), in_b.get(p, 0)) for p in seen}
