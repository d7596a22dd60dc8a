"""FSDP2 on real CPU processes (gloo): each block's gathers and reductions
under that block, as FSDP's own records count them, with the bytes they move
and the wait they cost the step."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from dc_core.analyzer import analyze
from tests.distributed.paired import planted_tops, steps_of
from tests.distributed.spawn import issued, profiled

SCRIPT = Path(__file__).with_name("fsdp_blocks.py")
EXPOSED = Path(__file__).with_name("fsdp_exposed.py")
BLOCKS = ("0", "1", "2", "3")
GATHER, REDUCE = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_"


def run(root: Path, ranks: int, *args: str, script: Path = SCRIPT) -> list:
    return profiled(script, root, ranks, *args)


def block_of(tree, node: int) -> str | None:
    """The block (a module frame named "0".."3") above ``node``, if any."""
    for frame in reversed(tree.path_frames(node)):
        if frame.kind == "module" and frame.name in BLOCKS:
            return frame.name
    return None


def fsdp_work(tree, node: int) -> bool:
    """Whether ``node`` runs inside FSDP's own work: a ``sharding`` frame, or
    (the gradients' reduction, on the native path) FSDP's autograd function."""
    return any(
        f.kind == "sharding" or f.name.startswith("RegisterPostBackwardFunction")
        for f in tree.path_frames(node)
    )


@pytest.mark.slow
@pytest.mark.parametrize(("ranks", "capture"), [(2, "native"), (4, "native")])
def test_each_blocks_collectives_sit_under_that_block(tmp_path, ranks, capture):
    profiles = run(tmp_path, ranks, str(ranks), capture)
    for p in profiles:
        tree = p.tree
        peer = json.loads((tmp_path / f"peer-{p.rank}.json").read_text())
        records = peer["records"]
        gathers, reduces = Counter(), Counter()
        moved = Counter()
        exposed = 0
        for node in issued(tree, lambda f: f.kind == "operator" and f.name.startswith("c10d::")):
            frame = tree.node_frame(node)
            block = block_of(tree, node)
            # every collective serves a block's parameters, inside FSDP's own work
            assert block is not None, tree.path_frames(node)
            assert fsdp_work(tree, node), tree.path_frames(node)
            count = tree.value(node, "count")
            (gathers if frame.name == GATHER else reduces)[block] += count
            moved[frame.name, block] += tree.value(node, "comm_bytes")
            exposed += tree.value(node, "exposed_comm_ns")
            assert tree.value(node, "comm_time_ns") > 0
        # as many as torch.profiler's FSDP records of each block, in the same steps
        for block in BLOCKS:
            assert gathers[block] == records[f"FSDP::all_gather ({block})"], block
            assert reduces[block] == records[f"FSDP::post_backward_reduce ({block})"], block
            size = peer["block_bytes"][block]
            # an all-gather brings the block's whole parameters, a reduce-scatter
            # takes its whole gradients
            assert moved[GATHER, block] == gathers[block] * size
            assert moved[REDUCE, block] == reduces[block] * size
        # the wait the step saw, all of it billed to the blocks' collectives: the
        # job's own timing of the waits on its process group's works, and of its
        # collective calls (a backend may run the collective there). A wait
        # that began before its collective completed is billed whole; of a
        # call, the collective's operator up to that completion is, not what
        # runs around it in the job's timing (the bindings, the dispatcher, the
        # interception: 60-660 us a call here, 2-20% of the step's wait)
        spent = peer["spent_ns"]
        assert exposed <= 1.02 * (spent["wait"] + spent["call"]), (exposed, spent)
        assert exposed - spent["wait"] >= 0.25 * spent["call"], (exposed, spent)
        assert exposed == sum(tree.value(n, "exposed_comm_ns") for n in range(len(tree)))
        # FSDP's work: before a block's backward its parameters are gathered
        # again, under the block's forward context mirrored in backward
        for node in issued(tree, lambda f: f.kind == "sharding"):
            frame, path = tree.node_frame(node), tree.path_frames(node)
            assert path[0].name == ("backward" if frame.backward else "forward"), path
            assert frame.backward == ("backward" in frame.name), frame
            if frame.name == "FSDP::backward_prefetch":
                # issued in the block after it (backward runs them in reverse)
                assert frame.detail == f"issued in {int(block_of(tree, node)) + 1}", path
        names = {tree.node_frame(n).name for n in tree.find_all(lambda f: f.kind == "sharding")}
        assert {"FSDP::pre_forward", "FSDP::pre_backward", "FSDP::backward_prefetch"} <= names
        # FSDP's machinery is no model operator to rewrite
        assert [f for f in analyze(p) if f["rule"] == "backward_imbalance"] == []


@pytest.mark.slow
def test_a_planted_exposed_all_gather_is_the_top_finding_and_prefetch_saves_it(tmp_path):
    """fsdp_exposed.py: block 1 is huge and resharded after forward, its
    gathers waited for in forward and backward. The finding names it, with the
    saving; steps that prefetch it (asynchronously, as the advice says),
    each next to a step that does not, save that much (the pairs' median
    against the windows', all from one stretch of the host's load:
    `tests.distributed.paired`)."""
    for rank, tops in planted_tops(EXPOSED, tmp_path).items():
        for top in tops:
            assert top["path"][-1] == "1 (FSDPSequential)"
            evidence = top["evidence"]
            assert evidence["forward_ns"] > 0 and evidence["backward_ns"] > 0
            assert evidence["all_gather_bytes"] == 2 * 2 * (2048 * 2048 + 2048) * 4  # twice a step
            assert "_set_unshard_async_op(True)" in top["suggestion"]
            assert "set_modules_to_forward_prefetch([1])" in top["suggestion"]
        steps = steps_of(tmp_path, rank)
        saved = statistics.median(off - on for off, on in zip(steps["off"], steps["on"]))
        gain = statistics.median(top["gain_ns"] for top in tops)
        assert 0.6 * gain <= saved <= 1.4 * gain, (saved, [top["gain_ns"] for top in tops])
