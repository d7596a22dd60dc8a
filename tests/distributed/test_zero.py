"""DeepSpeed ZeRO on real CPU processes (gloo): the engine's backward and step
read as phases, ZeRO-3's gathers under the module whose parameters they
bring, its gradient reduce-scatters under the modules of their bucket,
ZeRO-2's buckets named by their modules; counts as torch.profiler counts the
same steps' collectives."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from dc_core.analyzer import analyze
from dc_core.model.comm import WAITED, by_module, zero_settings
from dc_core.store.logdir import load_profiles
from tests.distributed.spawn import issued, launch

SCRIPT = Path(__file__).with_name("zero_blocks.py")
RUN_SCRIPT = Path(__file__).with_name("zero_run.py")
LINEARS = [f"{b}.{i}" for b in range(4) for i in (0, 2)]  # as the user's model names them
GATHER, REDUCE = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_"
STEPS = 2


def run(root: Path, stage: int, prefetch: int) -> list:
    launch(
        root,
        sys.executable,
        str(SCRIPT),
        str(root),
        "2",
        str(stage),
        str(prefetch),
        DS_ACCELERATOR="cpu",
    )
    profiles, errors = load_profiles(root)
    assert errors == [] and sorted(p.rank for p in profiles) == [0, 1]
    return profiles


def collectives(tree) -> list[tuple[int, list]]:
    """(node, its path's frames) of every collective (not a wait timed away
    from its launch)."""
    found = issued(
        tree, lambda f: f.kind == "operator" and f.name.startswith("c10d::") and f.detail != WAITED
    )
    return [(n, tree.path_frames(n)) for n in found]


def linear_of(path: list) -> str | None:
    """The Linear (named as the profile names it: ``module.<b>.<i>``) above a node."""
    names = [f.name for f in path if f.kind == "module" and f.detail == "Linear"]
    return names[-1].removeprefix("module.") if names else None


def assert_counted_as_peer(tmp_path: Path, p, tree) -> dict:
    """Every collective torch.profiler saw in the window's steps, and no other."""
    peer = json.loads((tmp_path / f"peer-{p.rank}.json").read_text())
    ours = Counter()
    for node, _path in collectives(tree):
        ours[tree.node_frame(node).name] += tree.value(node, "count")
    assert dict(ours) == peer["records"]
    return peer


@pytest.mark.slow
def test_zero3_gathers_sit_under_the_module_they_bring_and_reductions_under_their_bucket(
    tmp_path,
):
    """Prefetch off: each Linear gathers its own parameters before its forward
    and again before its backward; each reduce bucket holds one Linear's gradients."""
    for p in run(tmp_path, 3, 0):
        tree = p.tree
        peer = assert_counted_as_peer(tmp_path, p, tree)
        gathers, reduces, moved, reduced = Counter(), Counter(), Counter(), Counter()
        for node, path in collectives(tree):
            frame = tree.node_frame(node)
            phase, count = path[0].name, tree.value(node, "count")
            if frame.name in (GATHER, REDUCE):
                linear = linear_of(path)
                assert linear is not None, path
                parent = path[-2]
                assert parent.kind == "sharding", path
                if frame.name == GATHER:
                    expected = "ZeRO::pre_forward" if phase == "forward" else "ZeRO::pre_backward"
                    assert parent.name == expected, path
                    gathers[linear, phase] += count
                    moved[linear] += tree.value(node, "comm_bytes")
                else:
                    # a bucket is reduced when the next gradient would overflow
                    # it, in that gradient's hook (under the autograd operator
                    # that ran it), the last one by the engine's backward after
                    # autograd, under the bucket's module; its frame names it
                    assert phase == "backward", path
                    assert parent.name == "ZeRO::reduce_scatter_grads", path
                    bucket = parent.detail.removeprefix("2 parameters of module.")
                    assert bucket in LINEARS, parent
                    if path[-3].kind == "operator":
                        assert path[-3].name == "torch::autograd::AccumulateGrad", path
                    else:
                        assert linear == bucket == LINEARS[0], path
                    reduces[bucket] += count
                    reduced[bucket] += tree.value(node, "comm_bytes")
            else:  # the engine's step: the gradients' norm; its forward: a check of the trace
                assert (phase, frame.name) in {
                    ("optimizer", "c10d::allreduce_"),
                    ("forward", "c10d::broadcast_"),
                }, path
        for linear in LINEARS:
            assert gathers[linear, "forward"] == STEPS, linear
            assert gathers[linear, "backward"] == STEPS, linear
            assert reduces[linear] == STEPS, linear
            size = peer["bytes"][linear]
            assert moved[linear] == 2 * STEPS * size
            assert reduced[linear] == STEPS * size
        # one row per Linear in the communication table, its own gathers' bytes
        # in it, and the collectives' bytes all in some row
        rows = {r.name.removeprefix("module."): r for r in by_module(tree)}
        # the engine's check of its trace broadcasts in the model's own call
        # (the model holds no parameters of its own: nothing else is there)
        model = rows.pop("module (Sequential)")
        assert {tree.node_frame(n).name for n in model.collectives} == {"c10d::broadcast_"}
        assert set(rows) == {f"{linear} (Linear)" for linear in LINEARS}
        for linear in LINEARS:
            assert rows[f"{linear} (Linear)"].bytes_by["forward all-gather"] == moved[linear] / 2
        total = sum(r.bytes for r in rows.values())
        assert total == 3 * STEPS * sum(peer["bytes"].values())
        assert [f for f in analyze(p) if f["rule"] == "backward_imbalance"] == []
        assert {r.sharded_by for r in rows.values()} == {"ZeRO"}
        assert tree.find_all(lambda f: f.detail == WAITED) == []  # each waits for its own
        # the engine's settings, as the analyzer's advice quotes them
        linear = str(64 * 256 + 256)
        assert zero_settings(p.env) == {
            "stage": "3",
            "dtype": "float32",
            "overlap_comm": "False",
            "reduce_bucket_size": linear,
            "stage3_prefetch_bucket_size": "0",
            "stage3_max_live_parameters": "1000000000",
            "stage3_max_reuse_distance": "0",
            "stage3_param_persistence_threshold": "0",
        }


@pytest.mark.slow
def test_zero3_prefetch_is_named_by_what_it_gathers_and_waited_for_where_it_is_used(tmp_path):
    """Prefetch on (a bucket of five Linears' parameter count): the root's
    fetch gathers the first bucket ahead, module 0's the rest; each is a
    prefetch frame in the issuing fetch, naming what it gathers and its issuer,
    and the step's wait for it is the first module that needs it."""
    for p in run(tmp_path, 3, 1):
        tree = p.tree
        peer = assert_counted_as_peer(tmp_path, p, tree)
        gathers = {}
        for node, path in collectives(tree):
            if tree.node_frame(node).name == GATHER:
                # in the issuing module's own fetch (the native path's place)
                assert [f.name for f in path[-3:-1]] == ["ZeRO::pre_forward"] * 1 + [
                    "ZeRO::forward_prefetch"
                ], path
                gathers[path[-2].detail] = (path[-4].name, tree.value(node, "comm_bytes"))
        # DeepSpeed takes parameters in their trace order until the bucket is
        # reached: five Linears and the weight of the sixth (2.2), then the rest
        sizes, weight = peer["bytes"], 64 * 256 * 4
        first = sum(sizes[n] for n in LINEARS[:5]) + weight
        assert gathers == {
            "11 parameters of module.0.0, module.0.2, module.1.0, module.1.2 …, issued in module": (
                "module",
                STEPS * first,
            ),
            "5 parameters of module.2.2, module.3.0, module.3.2, issued in module.0": (
                "module.0",
                STEPS * (sum(sizes.values()) - first),
            ),
        }
        # each bucket is waited for in the fetch of the first Linear it serves
        # (the second begins with 2.2's bias): that Linear's row has the wait
        waits, waited = Counter(), Counter()
        for node in tree.find_all(lambda f: f.detail == WAITED):
            path = tree.path_frames(node)
            assert path[-1].name == GATHER and path[-2].name == "ZeRO::pre_forward", path
            waits[linear_of(path)] += tree.value(node, "count")
            waited[linear_of(path)] += tree.value(node, "exposed_comm_ns")
        assert waits == {"0.0": STEPS, "2.2": STEPS}
        rows = {r.name: r for r in by_module(tree)}
        for linear in ("0.0", "2.2"):
            row = rows[f"module.{linear} (Linear)"]
            # the wait is that Linear's exposed gather (nothing where the
            # gather had completed before the wait began, as a prefetch may)
            assert row.exposed_by.get("forward all-gather", 0) == waited[linear]
            # the bytes stay with the gather, in the fetch that launched it
            assert row.bytes_by.get("forward all-gather", 0) == 0
        assert rows["module (Sequential)"].bytes_by["forward all-gather"] == STEPS * first


@pytest.mark.slow
def test_zero2_backward_and_step_are_phases_and_buckets_name_their_modules(tmp_path):
    for p in run(tmp_path, 2, 0):
        tree = p.tree
        peer = assert_counted_as_peer(tmp_path, p, tree)
        named = Counter()
        for node, path in collectives(tree):
            frame, phase = tree.node_frame(node), path[0].name
            if frame.name == GATHER:  # the updated partitions, gathered by the engine's step
                assert phase == "optimizer", path
                assert tree.value(node, "comm_bytes") == STEPS * sum(peer["bytes"].values())
                continue
            assert frame.name == "c10d::allreduce_", path
            if path[-2].kind != "sharding":  # the engine's step: the gradients' norm
                assert phase == "optimizer", path
                continue
            # every gradient bucket in backward, its frame naming the Linear it holds
            assert phase == "backward", path
            assert path[-2].name == "ZeRO::reduce_bucket", path
            detail = path[-2].detail
            assert detail.startswith("2 parameters of module."), detail
            named[detail.removeprefix("2 parameters of module.")] += tree.value(node, "count")
        assert named == {linear: STEPS for linear in LINEARS}
        assert zero_settings(p.env) == {
            "stage": "2",
            "dtype": "float32",
            "overlap_comm": "False",
            "reduce_bucket_size": str(64 * 256 + 256),
        }


@pytest.mark.slow
def test_deepcontext_run_torchrun_ends_a_step_where_the_engine_s_updating_step_returns(tmp_path):
    """No DeepContext in the script: ``deepcontext run`` follows torch's
    optimizer, which ZeRO steps inside ``engine.step()``; the step ends where
    that call returns (the gathers of the updated parameters after torch's
    update are the step's optimizer work, not the next step's forward), and
    only at calls that updated (two micro-batches a step)."""
    out = tmp_path / "out"
    # no time range: DeepSpeed's start (its comm op built at first use) can
    # take a loaded host past the default 60 s before the first update
    command = [sys.executable, "-m", "dc_core", "run", "--steps", "2:2", "--time-fallback", "600"]
    command += ["--logdir", str(out)]
    torchrun = ["torchrun", "--nproc-per-node", "2", str(RUN_SCRIPT), str(tmp_path)]
    done = launch(tmp_path, *command, "--no-report", "--", *torchrun, DS_ACCELERATOR="cpu")
    assert "2 processes profiled" in done.stderr
    for rank in (0, 1):
        assert json.loads((tmp_path / f"updates-{rank}.json").read_text()) == 6
    profiles, errors = load_profiles(out)
    assert errors == [] and sorted(p.rank for p in profiles) == [0, 1]
    for p in profiles:
        assert p.steps == (2, 4)
        assert p.step_source.startswith("each DeepSpeedEngine.step at zero_run.py:")
        tree = p.tree
        # forward is the model's and the loss's: nothing else runs outside the engine
        outside = set()
        for node in tree.find_all(lambda f: f.kind == "operator"):
            path = tree.path_frames(node)
            if path[0].name == "forward" and not any(f.name == "DeepSpeedEngine" for f in path):
                outside.add(path[-1].name)
        assert outside - {"deepcontext::call_paths"} == {"aten::pow", "aten::mean"}
        # two micro-batches per step, both in forward (no step ends, no phase
        # changes at a call that did not update): each Linear ran twice a step
        runs = Counter()
        for node in tree.find_all(
            lambda f: f.name == "LinearFunctionForZeroStage3" and not f.backward
        ):
            path = tree.path_frames(node)
            runs[path[0].name, linear_of(path)] += tree.value(node, "count")
        assert runs == {("forward", linear): 2 * STEPS for linear in ("0.0", "0.2", "1.0", "1.2")}
        # the updated parameters' gathers after torch's update: in the optimizer phase
        gathers = [n for n, path in collectives(tree) if path[-1].name == GATHER]
        assert gathers and all(tree.path_frames(n)[0].name == "optimizer" for n in gathers)
