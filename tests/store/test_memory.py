"""The window's memory facts in the profile file: per device its peak, the
allocator's own numbers, drop counters and timeline; what was asked for and
could not be collected. Round trip, and what a reader makes of bad values."""

from __future__ import annotations

import pytest

from dc_core.model.kinds import at_peak, base_metric, unit_of
from dc_core.model.tree import tree_from_lists
from dc_core.store import profile_pb2
from dc_core.store.profile import (
    DEVICE_MEMORY_FIELDS,
    DeviceMemory,
    Profile,
    ProfileError,
    decode,
    encode,
    memory_metric,
)

MiB = 1 << 20


def memory_profile() -> Profile:
    tree = tree_from_lists(
        (
            "forward",
            (
                "module:encoder",
                "aten::mm @peak_live_bytes=9437184,peak_live_bytes.saved_for_backward=9437184",
            ),
        ),
        ("dataloader", "python:__next__|/w/data.py:9 @peak_live_bytes@cpu=1048576"),
    )
    mm = tree.find("forward", "encoder", "aten::mm")
    cuda = DeviceMemory(
        device="cuda:0",
        peak_bytes=36 * MiB,
        peak_t_ns=5_000_000,
        peak_node=mm,
        peak_step=6,
        peak_phase="backward",
        held_at_peak_bytes=24 * MiB,
        allocator_peak_bytes=13 * MiB,
        max_reserved_bytes=40 * MiB,
        live_dropped=2,
        unknown_frees=3,
        timeline_t_ns=[0, 1_000_000, 2_000_000],
        timeline_bytes=[24 * MiB, 30 * MiB, 36 * MiB],
    )
    cpu = DeviceMemory(device="cpu", peak_bytes=MiB, peak_node=-1)
    return Profile(
        tree=tree,
        steps=(5, 8),
        memory=[cuda, cpu],
        memory_missing=["peak_live_bytes.gradient"],
        memory_note="no gradient hooks on this path",
    )


def test_memory_round_trips_every_field():
    original = memory_profile()
    back = decode(encode(original))
    mm = original.tree.find("forward", "encoder", "aten::mm")
    assert back.memory == original.memory and back.memory[0].peak_node == mm == 3
    assert back.memory[0].timeline_bytes == [24 * MiB, 30 * MiB, 36 * MiB]
    assert (back.memory[0].live_dropped, back.memory[0].unknown_frees) == (2, 3)
    assert back.memory[1] == DeviceMemory("cpu", peak_bytes=MiB)
    assert back.memory_missing == ["peak_live_bytes.gradient"]
    assert back.memory_note == "no gradient hooks on this path"
    assert back.tree.units["peak_live_bytes.saved_for_backward"] == "bytes"
    assert back.tree.units["peak_live_bytes@cpu"] == "bytes"
    back.source = original.source  # where it was read from: not the profile's data
    assert back == original


def test_every_schema_field_is_a_dataclass_field():
    assert DEVICE_MEMORY_FIELDS == tuple(
        f for f in DeviceMemory.__dataclass_fields__ if f in DEVICE_MEMORY_FIELDS
    )
    assert set(DEVICE_MEMORY_FIELDS) == set(DeviceMemory.__dataclass_fields__)


def test_a_profile_without_memory_reads_none():
    p = decode(encode(Profile(tree=tree_from_lists("forward @cpu_time_ns=5"), steps=(0, 1))))
    assert p.memory == [] and p.memory_missing == [] and p.memory_note == ""


@pytest.mark.parametrize("node", [7, 2**31 - 1, -2, -(2**31)])
def test_a_peak_node_outside_the_tree_reads_as_unknown(node):
    msg = profile_pb2.Profile.FromString(encode(memory_profile()))
    msg.memory[0].peak_node = node
    msg.memory[0].peak_step = -(2**63)
    back = decode(msg.SerializeToString(), "m.pb")
    assert back.memory[0].peak_node == -1 and back.memory[0].peak_step == -1
    assert back.memory[0].peak_bytes == 36 * MiB  # the rest as written


def test_a_timeline_of_unequal_columns_is_refused_naming_the_file():
    msg = profile_pb2.Profile.FromString(encode(memory_profile()))
    msg.memory[1].timeline_t_ns.append(5)
    with pytest.raises(ProfileError) as caught:
        decode(msg.SerializeToString(), "run/steps-5-7.pb")
    assert str(caught.value) == (
        "run/steps-5-7.pb: corrupt profile "
        "(a memory timeline has times and bytes of different lengths)"
    )


def test_the_main_device_is_first_and_the_others_carry_a_suffix():
    memory = memory_profile().memory
    assert memory_metric("peak_live_bytes", memory, "cuda:0") == "peak_live_bytes"
    assert (
        memory_metric("peak_live_bytes.gradient", memory, "cpu") == "peak_live_bytes.gradient@cpu"
    )
    assert base_metric("peak_live_bytes.gradient@cuda:1") == "peak_live_bytes"
    assert at_peak("peak_live_bytes.input@cpu") and not at_peak("alloc_bytes@cpu")
    assert [unit_of(m) for m in ("free_bytes@cpu", "cpu_time_ns", "flops", "x.y")] == [
        "bytes",
        "ns",
        "1",
        "1",
    ]
