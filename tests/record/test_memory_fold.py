"""The collector's memory readout folded into a snapshot's columns and the
profile's per-device facts (dc_core/record/memory.py)."""

from __future__ import annotations

from dc_core.model.kinds import MEMORY_CATEGORIES
from dc_core.record.memory import PEAK_MARK, _step_at, device_name, fold_memory


def _device(type_, index, nodes, peak_node, temporary, parameter=()):
    peak = {c: [0] * nodes for c in MEMORY_CATEGORIES}
    peak["temporary"] = list(temporary)
    if parameter:
        peak["parameter"] = list(parameter)
    return {
        "type": type_,
        "index": index,
        "alloc_bytes": [0, 100, 50][:nodes],
        "free_bytes": [0, 40, 0][:nodes],
        "peak_bytes": peak,
        "peak": 10,
        "peak_ns": 5,
        "peak_node": peak_node,
        "held_at_peak": 0,
        "allocator_peak": 10,
        "max_reserved": 0,
        "live": 0,
        "timeline_ns": [1, 2],
        "timeline_bytes": [3, 4],
        "live_dropped": 0,
        "unknown_frees": 0,
    }


def test_the_accelerator_is_the_main_device_and_the_host_gets_a_suffix():
    snap = {"parent": [-1, 0, 0], "metrics": {"alloc_bytes": [0, 7, 7]}, "units": {}}
    readout = {
        "devices": [
            _device(0, 0, 3, 2, [0, 0, 30]),
            _device(1, 0, 2, 1, [0, 60], parameter=[5, 0]),  # shorter: nodes it never saw
        ]
    }
    facts = fold_memory(snap, readout)
    assert [f["device"] for f in facts] == ["cuda:0", "cpu"]
    m = snap["metrics"]
    # the allocator's count replaces alloc_bytes read from operator outputs
    assert m["alloc_bytes"] == [0, 100, 0] and m["alloc_bytes@cpu"] == [0, 100, 50]
    assert m["peak_live_bytes"] == [5, 60, 0]
    assert m["peak_live_bytes.parameter"] == [5, 0, 0]
    assert m["peak_live_bytes.temporary@cpu"] == [0, 0, 30]
    assert "peak_live_bytes.gradient" not in m  # no bytes, no column
    assert m[PEAK_MARK + "cuda:0"] == [0, 1, 0] and m[PEAK_MARK + "cpu"] == [0, 0, 1]
    assert snap["units"]["peak_live_bytes@cpu"] == "bytes"


def test_a_device_that_saw_nothing_is_left_out():
    snap = {"parent": [-1, 0], "metrics": {}, "units": {}}
    empty = _device(1, 1, 2, -1, [0, 0])
    empty["alloc_bytes"], empty["peak"] = [], 0
    assert fold_memory(snap, {"devices": [empty]}) == []
    assert snap["metrics"] == {}


def test_the_peaks_step_is_the_last_begun_at_or_before_it():
    begins = [100, 250, 400]  # a step runs to the next one's start, compile included
    assert _step_at(99, begins, 5) == -1
    assert _step_at(100, begins, 5) == 5
    assert _step_at(399, begins, 5) == 6
    assert _step_at(10_000, begins, 5) == 7
    assert _step_at(0, begins, 5) == -1 and _step_at(300, [], 5) == -1


def test_device_names_follow_torch():
    assert [device_name(0, 0), device_name(1, 2), device_name(13, 0)] == ["cpu", "cuda:2", "mps:0"]
