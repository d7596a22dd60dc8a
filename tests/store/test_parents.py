"""The decoder's parent check: a parent must come before its child
(``0 <= parent[i] < i`` for every node but the root), whichever path checks
it. Trees of `VECTOR_FROM` nodes or more are checked with numpy; its result
must be the scalar loop's, and the error names the file and the node (it said
only "parents do not form a tree")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dc_core.store import profile_pb2
from dc_core.store.profile import VECTOR_FROM, ProfileError, decode, misparented


def encoded(parent: list[int]) -> bytes:
    """A profile whose tree has the parent column ``parent`` (one frame, every node on it)."""
    msg = profile_pb2.Profile(version=1)
    msg.strings.extend(["", "op"])
    msg.tree.frames.add(kind=0, name=1)
    msg.tree.parent.extend(parent)
    msg.tree.frame.extend([0] * len(parent))
    metric = msg.tree.metrics.add(name="count", unit="count")
    metric.values.extend([1] * len(parent))
    return msg.SerializeToString()


def chain(n: int) -> list[int]:
    return [-1, *range(n - 1)]


def scalar(parent: list[int]) -> int | None:
    """The rule as written: the first node whose parent is not before it."""
    return next((i for i in range(1, len(parent)) if not 0 <= parent[i] < i), None)


SIZES = [VECTOR_FROM - 1, VECTOR_FROM, 92, 100_000]
DAMAGE = {
    "self": lambda i: i,
    "forward": lambda i: i + 1,
    "far forward": lambda i: 2**31 - 1,
    "negative": lambda i: -1,
    "very negative": lambda i: -(2**31),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_parent_not_before_its_child_is_refused_naming_the_node(n, how):
    for node in sorted({1, 40, n // 2, n - 1}):
        parent = chain(n)
        parent[node] = DAMAGE[how](node)
        with pytest.raises(ProfileError) as caught:
            decode(encoded(parent), "run/steps-5-7.pb")
        assert str(caught.value) == (
            f"run/steps-5-7.pb: corrupt profile (parents do not form a tree: "
            f"node {node} has parent {parent[node]}, not a node before it)"
        ), (how, node)


@pytest.mark.parametrize("n", [92, 100_000])
def test_a_self_parented_tree_is_refused_at_its_first_node(n):
    parent = [-1, *range(1, n)]  # every node its own parent: no walk from the root reaches any
    with pytest.raises(ProfileError, match=r"node 1 has parent 1, not a node before it"):
        decode(encoded(parent), "self.pb")


@pytest.mark.parametrize("n", SIZES)
def test_trees_whose_parents_come_first_decode(n):
    for parent in (chain(n), [-1] + [0] * (n - 1), [-1] + [i // 2 for i in range(1, n)]):
        tree = decode(encoded(parent), "ok.pb").tree
        assert tree.parent == parent and tree.inclusive("count")[0] == n


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.integers(1, 3 * VECTOR_FROM).flatmap(
        lambda n: st.lists(
            st.integers(-3, n + 2) | st.sampled_from([-(2**31), 2**31 - 1]), min_size=n, max_size=n
        )
    ),
    st.booleans(),
)
def test_both_paths_reject_exactly_the_same_trees(parent, mostly_good):
    parent = [-1, *parent[1:]]
    if mostly_good:  # a valid tree with one node changed: the error is where the change is
        good = [-1, *(p % i for i, p in enumerate(parent) if i)]
        parent = good[:] if len(good) < 3 else [*good[:-2], parent[-2], good[-1]]
    assert misparented(parent) == scalar(parent)
