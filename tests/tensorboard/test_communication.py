"""The Communication view's route: per module that collectives serve, the
report's rows (compute, exposed communication and the sharding runtime per
step, comm time, bytes), each with its module's node; a window without
collectives says so."""

from __future__ import annotations

from pathlib import Path

from dc_core.store.logdir import write_profile
from dc_core.tensorboard import communication
from tests.analyzer.helpers import MS
from tests.analyzer.test_communication import STEPS, fsdp_step
from tests.tensorboard.conftest import Api

C = {"run": "fsdp", "rank": 0, "window": "1-4"}


def test_each_sharded_module_has_its_parts_per_step_and_its_node(api: Api, logdir: Path):
    p = fsdp_step(big_exposed=60 * MS)
    write_profile(p, logdir, "fsdp")
    body = api.json("/communication", **C)
    assert body["message"] == ""
    assert body["parts"] == ["compute_ns", "exposed_ns", "runtime_ns"]
    assert [key for key, _ in body["columns"]] == [
        "compute_ns",
        "exposed_ns",
        "runtime_ns",
        "comm_ns",
        "bytes",
    ]
    rows = body["rows"]
    assert [r["label"] for r in rows] == ["blocks.1", "blocks.0"]  # most exposed first
    big, small = rows
    # the report's numbers (tests/analyzer/test_communication.py), per step
    assert big["compute_ns"] == 30 * MS and big["runtime_ns"] == round(7 * MS / STEPS)
    assert big["exposed_ns"] == big["comm_ns"] == round(124 * MS / STEPS)
    assert big["bytes"] == 3 * 64 << 20 and big["calls"] == 3
    assert small["exposed_ns"] == small["comm_ns"] == round(MS / STEPS)
    assert small["bytes"] == 1024
    # the node is the module's forward node: the details panel opens it
    tree = p.tree
    assert big["node"] == tree.find("forward", "train", "blocks.1")
    assert small["node"] == tree.find("forward", "train", "blocks.0")
    node = api.json("/node", **C, node=big["node"], metric="cpu_time_ns")
    assert [f["label"] for f in node["path"]] == ["forward", "train.py:20 train", "blocks.1"]
    assert big["kind"] == "module"


def test_a_window_without_collectives_says_so(api: Api):
    body = api.json("/communication", run="run-a", rank=0, window="5-8")
    assert body["rows"] == [] and body["message"] == communication.NO_COLLECTIVES
