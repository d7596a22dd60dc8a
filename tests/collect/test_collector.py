"""The collector contract (``dc_core/_native.pyi``), run against both implementations.

Every test taking ``collector`` or ``make_collector`` runs twice: ``[native]``
(the C++ extension; skipped while it is not built, a failure in CI) and
``[reference]`` (the pure-Python executable specification).
"""

from __future__ import annotations

import inspect
import sys
import textwrap
import threading
import time
from typing import NamedTuple

import pytest

from dc_core.collect import reference

# A "framework" file: frames from it are what skip_prefix is for. Compiled
# under a made-up path so the test decides exactly which frames it holds.
LIB_FILE = "/virtual/framework/lib.py"
_lib: dict = {}
exec(
    compile(
        textwrap.dedent(
            """
            def call(fn, *args):
                return fn(*args)
            """
        ),
        LIB_FILE,
        "exec",
    ),
    _lib,
)
lib_call = _lib["call"]


# --- decoding a snapshot --------------------------------------------------


class Frame(NamedTuple):
    kind: int
    name: str
    file: str
    line: int
    detail: str
    flags: int


class Snap:
    """A snapshot decoded for assertions: frames by id, nodes by path of frame names."""

    def __init__(self, collector) -> None:
        self.raw = collector.snapshot()

    def frame(self, frame_id: int) -> Frame:
        f, strings = self.raw["frames"], self.raw["strings"]
        return Frame(
            f["kind"][frame_id],
            strings[f["name"][frame_id]],
            strings[f["file"][frame_id]],
            f["line"][frame_id],
            strings[f["detail"][frame_id]],
            f["flags"][frame_id],
        )

    def node_frame(self, node: int) -> Frame:
        return self.frame(self.raw["frame"][node])

    def path(self, node: int) -> tuple[str, ...]:
        """Frame names from the root's child down to ``node`` (``()`` for the root)."""
        names = []
        while node > 0:
            names.append(self.node_frame(node).name)
            node = self.raw["parent"][node]
        return tuple(reversed(names))

    def value(self, metric: str, node: int) -> int:
        return self.raw["metrics"][metric][node]

    def tree(self) -> dict[tuple[str, ...], dict[str, int]]:
        """``{path: {metric: value}}`` for every non-root node, non-zero metrics only."""
        return {
            self.path(node): {m: v[node] for m, v in self.raw["metrics"].items() if v[node]}
            for node in range(1, len(self.raw["parent"]))
        }

    def subtree_samples(self, node: int) -> int:
        parent, samples = self.raw["parent"], self.raw["metrics"]["samples"]
        total = 0
        for n in range(len(parent)):
            m = n
            while m > node:
                m = parent[m]
            if m == node:
                total += samples[n]
        return total


def spin(seconds: float) -> int:
    """Burn CPU in this function for ``seconds`` (no sleep: the sampler must see it)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


SPIN_LINES, _first = inspect.getsourcelines(spin)
SPIN_LINES = range(_first, _first + len(SPIN_LINES))


def contract_module(collector):
    return sys.modules[type(collector).__module__]


# --- identity ---------------------------------------------------------------


def test_constants_match_the_contract(collector):
    mod = contract_module(collector)
    kinds = [
        mod.KIND_ROOT,
        mod.KIND_PYTHON,
        mod.KIND_MODULE,
        mod.KIND_OPERATOR,
        mod.KIND_NATIVE,
        mod.KIND_KERNEL,
        mod.KIND_PHASE,
        mod.KIND_COMPILED,
    ]
    assert kinds == list(range(8))
    assert (mod.FLAG_BACKWARD, mod.METRIC_CPU_TIME, mod.METRIC_COUNT, mod.METRIC_SAMPLES) == (
        1,
        0,
        1,
        2,
    )
    before = time.monotonic_ns()
    now = mod.now_ns()
    assert before <= now <= time.monotonic_ns()  # CLOCK_MONOTONIC, the same clock


def test_root_is_node_0_with_the_empty_root_frame(collector):
    s = Snap(collector)
    assert collector.node_count() == 1
    assert list(s.raw["parent"]) == [-1] and list(s.raw["frame"]) == [0]
    assert s.frame(0) == Frame(reference.KIND_ROOT, "", "", 0, "", 0)
    assert collector.intern(reference.KIND_ROOT, "") == 0
    assert collector.top() == 0 and collector.depth() == 0


def test_intern_is_stable_and_every_field_is_identity(collector):
    c = collector
    base = ("aten::mm", "f.py", 3, "cpu", 0)
    op = c.intern(reference.KIND_OPERATOR, *base)
    assert c.intern(reference.KIND_OPERATOR, *base) == op
    variants = [
        c.intern(reference.KIND_KERNEL, *base),
        c.intern(reference.KIND_OPERATOR, "aten::bmm", "f.py", 3, "cpu", 0),
        c.intern(reference.KIND_OPERATOR, "aten::mm", "g.py", 3, "cpu", 0),
        c.intern(reference.KIND_OPERATOR, "aten::mm", "f.py", 4, "cpu", 0),
        c.intern(reference.KIND_OPERATOR, "aten::mm", "f.py", 3, "cuda", 0),
        c.intern(reference.KIND_OPERATOR, "aten::mm", "f.py", 3, "cpu", reference.FLAG_BACKWARD),
    ]
    assert len({op, *variants}) == 7
    assert c.intern(reference.KIND_PHASE, "forward") == c.intern(
        reference.KIND_PHASE, "forward", "", 0, "", 0
    )
    s = Snap(c)
    assert s.frame(op) == Frame(reference.KIND_OPERATOR, "aten::mm", "f.py", 3, "cpu", 0)
    assert s.frame(variants[-1]).flags == reference.FLAG_BACKWARD
    assert len(set(s.raw["strings"])) == len(s.raw["strings"])  # strings are interned too


# --- tree and metrics ---------------------------------------------------------


def test_child_finds_or_inserts_and_path_chains(collector):
    c = collector
    fwd, mm = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    a = c.child(0, fwd)
    assert c.child(0, fwd) == a and a != 0
    b = c.child(a, mm)
    assert c.path(0, [fwd, mm]) == b and c.path(0, []) == 0 and c.path(a, [mm]) == b
    other = c.child(0, mm)  # same frame, other parent: another node
    assert other not in (a, b)
    assert c.node_count() == 4
    s = Snap(c)
    assert {s.path(n) for n in (a, b, other)} == {
        ("forward",),
        ("forward", "aten::mm"),
        ("aten::mm",),
    }
    with pytest.raises((IndexError, ValueError)):
        c.child(c.node_count(), fwd)


def test_parent_of_each_node_and_minus_one_for_the_root(collector):
    c = collector
    fwd, mm = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    a = c.child(0, fwd)
    b = c.child(a, mm)
    assert (c.parent(0), c.parent(a), c.parent(b)) == (-1, 0, a)
    with pytest.raises((IndexError, ValueError)):
        c.parent(c.node_count())


def test_mirror_replays_the_path_below_the_phase_under_another_top(collector):
    c = collector
    fwd, bwd = c.intern(reference.KIND_PHASE, "forward"), c.intern(reference.KIND_PHASE, "backward")
    line, mod, mm = (
        c.intern(reference.KIND_PYTHON, "f", "m.py", 3),
        c.intern(reference.KIND_MODULE, "lin"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    f_phase, b_phase = c.child(0, fwd), c.child(0, bwd)
    deep = c.path(f_phase, [line, mod, mm])
    count = c.node_count()
    mirrored = c.mirror(deep, b_phase)
    assert Snap(c).path(mirrored) == ("backward", "f", "lin", "aten::mm")
    assert c.node_count() == count + 3
    # memoized, nothing new
    assert c.mirror(deep, b_phase) == mirrored and c.node_count() == count + 3
    assert c.mirror(c.parent(deep), b_phase) == c.parent(mirrored)  # the context of an operator
    assert c.mirror(f_phase, b_phase) == b_phase and c.mirror(0, b_phase) == b_phase
    assert c.mirror(deep, f_phase) == deep  # under its own phase: itself
    elsewhere = c.mirror(deep, mirrored)  # any top, not only phases
    assert Snap(c).path(elsewhere) == ("backward", "f", "lin", "aten::mm", "f", "lin", "aten::mm")
    with pytest.raises((IndexError, ValueError)):
        c.mirror(c.node_count(), b_phase)
    with pytest.raises((IndexError, ValueError)):
        c.mirror(deep, c.node_count())


def test_mirror_after_reset_rebuilds_instead_of_returning_stale_nodes(collector):
    c = collector
    fwd, bwd, mm = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_PHASE, "backward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    f_phase = c.child(0, fwd)
    deep, b_phase = c.child(f_phase, mm), c.child(0, bwd)
    assert c.mirror(deep, b_phase) == c.node_count() - 1  # the newest node
    c.reset()
    other = c.intern(reference.KIND_OPERATOR, "aten::bmm")
    # the same ids again, other nodes: (deep, b_phase) is now (backward → bmm, forward)
    assert (c.child(0, bwd), c.child(c.child(0, bwd), other), c.child(0, fwd)) == (
        f_phase,
        deep,
        b_phase,
    )
    mirrored = c.mirror(deep, b_phase)
    assert mirrored < c.node_count() and Snap(c).path(mirrored) == ("forward", "aten::bmm")


def test_metrics_register_once_with_a_unit_and_add_exclusive_values(collector):
    c = collector
    assert (c.metric("cpu_time_ns", "ns"), c.metric("count", "1"), c.metric("samples", "1")) == (
        0,
        1,
        2,
    )
    flops = c.metric("flops", "1")
    assert flops == 3 and c.metric("flops", "1") == flops
    with pytest.raises(ValueError):
        c.metric("flops", "bytes")
    with pytest.raises(ValueError):
        c.metric("cpu_time_ns", "us")
    node = c.child(0, c.intern(reference.KIND_OPERATOR, "aten::mm"))
    c.add(node, flops, 5)
    c.add(node, flops, 7)
    c.add(0, reference.METRIC_COUNT, 2)
    s = Snap(c)
    assert s.raw["units"] == {"cpu_time_ns": "ns", "count": "1", "samples": "1", "flops": "1"}
    assert list(s.raw["metrics"]["flops"]) == [0, 12]
    assert list(s.raw["metrics"]["count"]) == [2, 0]
    with pytest.raises((IndexError, ValueError)):
        c.add(c.node_count(), flops, 1)


def test_snapshot_columns_are_int64_arrays_of_consistent_length(collector):
    c = collector
    c.metric("alloc_bytes", "bytes")
    c.path(0, [c.intern(reference.KIND_PHASE, p) for p in ("forward", "backward")])
    s = Snap(c).raw
    assert set(s) == {"parent", "frame", "metrics", "units", "frames", "strings", "drops"}
    assert s["parent"][0] == -1
    columns = [s["parent"], s["frame"], *s["metrics"].values()]
    assert all(col.typecode == "q" and len(col) == c.node_count() == 3 for col in columns)
    assert set(s["frames"]) == {"kind", "name", "file", "line", "detail", "flags"}
    assert len({len(col) for col in s["frames"].values()}) == 1
    assert all(col.typecode == "q" for col in s["frames"].values())
    assert all(0 <= p < n for n, p in enumerate(s["parent"]) if n)  # parents come first
    assert s["drops"] == {"nodes": 0, "samples": 0, "monitor": 0}


def test_step_bounds_keep_each_nodes_least_and_greatest_step(collector):
    c = collector
    op = lambda name: c.child(0, c.intern(reference.KIND_OPERATOR, name))  # noqa: E731
    steady, spiky = op("aten::mm"), op("aten::add")
    assert "step_bounds" not in Snap(c).raw  # no step marked yet
    for steady_ns, spiky_ns in ((10, 5), (12, 500), (11, 6)):  # one step preempted the add
        c.add(steady, reference.METRIC_CPU_TIME, steady_ns)
        c.add(spiky, reference.METRIC_CPU_TIME, spiky_ns)
        c.mark_step()
    late = op("aten::cat")  # runs only in the fourth step: 0 in the others
    c.add(late, reference.METRIC_CPU_TIME, 7)
    c.mark_step()
    c.add(steady, reference.METRIC_CPU_TIME, 1000)  # after the last mark: in no step's bounds
    s = Snap(c).raw
    low, high = (list(s["step_bounds"][f"cpu_time_ns.{b}"]) for b in ("min", "max"))
    assert s["steps_marked"] == 4
    assert (low[steady], high[steady]) == (0, 12)  # the fourth step had no mm
    assert (low[spiky], high[spiky]) == (0, 500)
    assert (low[late], high[late]) == (0, 7)
    assert len(low) == len(high) == c.node_count()
    c.reset()
    assert "step_bounds" not in Snap(c).raw


def test_step_bounds_of_a_node_every_step_runs(collector):
    c = collector
    node = c.child(0, c.intern(reference.KIND_OPERATOR, "aten::mm"))
    for ns in (30, 20, 25):
        c.add(node, reference.METRIC_CPU_TIME, ns)
        c.mark_step()
    bounds = Snap(c).raw["step_bounds"]
    assert (bounds["cpu_time_ns.min"][node], bounds["cpu_time_ns.max"][node]) == (20, 30)


def test_node_cap_returns_the_parent_and_counts_drops(make_collector):
    c = make_collector(max_nodes=10)
    frames = [c.intern(reference.KIND_OPERATOR, f"op{i}") for i in range(20)]
    nodes = [c.child(0, f) for f in frames]
    assert c.node_count() == 10
    assert nodes[:9] == list(range(1, 10)) and nodes[9:] == [0] * 11
    assert c.child(0, frames[3]) == nodes[3]  # finding an existing node is no drop
    assert c.path(nodes[1], [frames[0], frames[1]]) == nodes[1]
    assert Snap(c).raw["drops"]["nodes"] == 13
    node = c.enter([frames[15]])  # scopes land on the parent too
    assert node == 0
    c.exit()
    assert Snap(c).value("count", 0) == 1


# --- scopes -----------------------------------------------------------------


def test_nested_scopes_record_count_and_exclusive_time(collector):
    c = collector
    outer_f, inner_f = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    outer = c.enter([outer_f])
    spin(0.002)
    inner = c.enter([inner_f])
    assert (c.top(), c.depth()) == (inner, 2)
    spin(0.002)
    inner_ns = c.exit()
    spin(0.002)
    outer_ns = c.exit()
    assert (c.top(), c.depth()) == (0, 0)
    assert 2_000_000 <= inner_ns < outer_ns
    s = Snap(c)
    assert s.tree() == {
        ("forward",): {"count": 1, "cpu_time_ns": outer_ns - inner_ns},
        ("forward", "aten::mm"): {"count": 1, "cpu_time_ns": inner_ns},
    }
    assert s.path(outer) == ("forward",) and s.path(inner) == ("forward", "aten::mm")


def test_explicit_parent_places_the_node_but_time_nests_by_thread(collector):
    c = collector
    step, fwd = c.intern(reference.KIND_PHASE, "step"), c.intern(reference.KIND_PHASE, "forward")
    c.enter([step])
    node = c.enter([fwd], 0)  # under the root, though "step" is open
    assert Snap(c).path(node) == ("forward",)
    fwd_ns = c.exit()
    step_ns = c.exit()
    s = Snap(c)
    assert s.value("cpu_time_ns", node) == fwd_ns
    assert s.value("cpu_time_ns", c.child(0, step)) == step_ns - fwd_ns


def test_exit_without_scope_returns_minus_one(collector):
    assert collector.exit() == -1
    assert collector.depth() == 0 and Snap(collector).tree() == {}


def test_count_is_exact(collector):
    c = collector
    f = c.intern(reference.KIND_OPERATOR, "aten::add")
    for _ in range(1000):
        c.enter([f])
        c.exit()
    assert Snap(collector).tree()[("aten::add",)]["count"] == 1000


def test_unwind_closes_scopes_after_an_exception(collector):
    c = collector
    a, b = c.intern(reference.KIND_PHASE, "forward"), c.intern(reference.KIND_MODULE, "blocks.0")
    depth = c.depth()
    try:
        c.enter([a])
        c.enter([b])
        raise RuntimeError("model failed")
    except RuntimeError:
        c.unwind(depth)
    assert (c.depth(), c.top(), c.exit()) == (0, 0, -1)
    c.unwind(5)  # deeper than open: nothing to do
    tree = Snap(c).tree()
    assert tree[("forward",)]["count"] == 1 and tree[("forward", "blocks.0")]["count"] == 1


def test_scopes_are_per_thread(collector):
    c = collector
    f = c.intern(reference.KIND_PHASE, "dataloader")
    main = c.enter([c.intern(reference.KIND_PHASE, "forward")])
    seen = {}

    def worker():
        seen["before"] = (c.depth(), c.top())
        seen["node"] = c.enter([f])
        seen["exit"] = c.exit()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["before"] == (0, 0)  # the main thread's scope is not the worker's
    assert Snap(c).path(seen["node"]) == ("dataloader",)
    assert (c.depth(), c.top()) == (1, main)
    c.exit()


def test_a_thread_that_died_inside_a_scope_leaves_nothing_to_the_next(collector):
    c = collector
    f = c.intern(reference.KIND_PHASE, "dataloader")
    seen = []

    def leave_open():
        seen.append((threading.get_ident(), c.depth()))
        c.enter([f])

    for _ in range(5):  # thread ids are usually reused: each new thread must start clean
        t = threading.Thread(target=leave_open)
        t.start()
        t.join()
    assert [depth for _, depth in seen] == [0] * 5
    assert Snap(c).tree() == {("dataloader",): {}}  # never closed, so never counted


def test_eight_threads_count_exactly(collector):
    c = collector
    f = c.intern(reference.KIND_OPERATOR, "aten::relu")
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        for _ in range(1000):
            c.enter([f])
            c.exit()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.node_count() == 2
    assert Snap(c).tree()[("aten::relu",)]["count"] == 8000
