"""Memory in the report: one header line per device (its peak, where, and what
the bytes were), what was not collected, the ``--json`` "memory"; the
memory metrics through ``--metric`` in bytes, and ``diff`` comparing peaks
as they are, not per step."""

from __future__ import annotations

import json
import re

import pytest

from dc_core.cli import main
from dc_core.model.tree import Frame, Tree
from dc_core.store.logdir import write_profile
from dc_core.store.profile import DEVICE_MEMORY_FIELDS, DeviceMemory, Profile

MiB = 1 << 20
TEMPORARY = 3_250_586  # 3.1 MiB


def memory_profile(saved: int = 9 * MiB) -> Profile:
    """A CUDA window peaking in backward's ``aten::addmm`` under module ``0
    (Linear)``: parameter 8 MiB, optimizer state 16 MiB, ``saved`` saved for
    backward, 3.1 MiB temporary; on the CPU 1 MiB of input in the dataloader."""
    t = Tree()

    def node(parent: int, frame: Frame, **metrics: int) -> int:
        n = t.child(parent, frame)
        for metric, value in metrics.items():
            t.add(n, metric.replace("__", ".").replace("_AT_", "@"), value)
        return n

    forward = node(0, Frame("phase", "forward"))
    line = node(forward, Frame("python", "train_step", "/w/train.py", 12))
    linear = node(
        line,
        Frame("module", "0", detail="Linear"),
        peak_live_bytes=8 * MiB,
        peak_live_bytes__parameter=8 * MiB,
    )
    node(
        linear,
        Frame("operator", "aten::addmm"),
        cpu_time_ns=1000,
        alloc_bytes=12 * MiB,
        free_bytes=3 * MiB,
        peak_live_bytes=saved,
        peak_live_bytes__saved_for_backward=saved,
    )
    backward = node(0, Frame("phase", "backward"))
    peak = node(
        node(backward, Frame("module", "0", detail="Linear")),
        Frame("operator", "aten::addmm", backward=True),
        cpu_time_ns=2000,
        peak_live_bytes=TEMPORARY,
        peak_live_bytes__temporary=TEMPORARY,
    )
    optimizer = node(0, Frame("phase", "optimizer"))
    node(
        optimizer,
        Frame("python", "step", "/w/optim.py", 1),
        cpu_time_ns=500,
        peak_live_bytes=16 * MiB,
        peak_live_bytes__optimizer_state=16 * MiB,
    )
    loader = node(0, Frame("phase", "dataloader"))
    batch = node(
        loader,
        Frame("python", "__next__", "/w/data.py", 9),
        cpu_time_ns=300,
        peak_live_bytes_AT_cpu=MiB,
        peak_live_bytes__input_AT_cpu=MiB,
    )
    cuda = DeviceMemory(
        "cuda:0",
        peak_bytes=t.total("peak_live_bytes"),
        peak_t_ns=5000,
        peak_node=peak,
        peak_step=3,
        peak_phase="backward",
        held_at_peak_bytes=24 * MiB,
        allocator_peak_bytes=13 * MiB,
        max_reserved_bytes=40 * MiB,
        timeline_t_ns=[0, 1000],
        timeline_bytes=[24 * MiB, 36 * MiB],
    )
    cpu = DeviceMemory("cpu", peak_bytes=MiB, peak_node=batch, peak_phase="dataloader")
    return Profile(
        tree=t,
        steps=(3, 5),
        step_times_ns=[10_000, 12_000],
        framework="torch",
        host="h",
        memory=[cuda, cpu],
    )


def cells(row: str) -> list[str]:
    """A table row's cells (columns are two or more blanks apart)."""
    return re.split(r"\s{2,}", row.strip())


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")  # each header on one line


def test_the_header_says_each_devices_peak_where_and_what(tmp_path, capsys, wide):
    write_profile(memory_profile(), tmp_path, "run")
    assert main(["report", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    memory = [line for line in lines if line.startswith("memory")]
    assert memory == [
        "memory (cuda:0): peak 36.1 MiB at step 3, backward, in aten::addmm [backward] under "
        "0 (Linear) \u2014 parameter 8.0 MiB, optimizer_state 16.0 MiB, saved_for_backward "
        "9.0 MiB, temporary 3.1 MiB",
        "memory (cpu): peak 1.0 MiB, dataloader, in data.py:9 __next__ \u2014 input 1.0 MiB",
    ]
    assert lines.index(memory[0]) == 1  # under the window's rule, above the table


def test_an_unknown_peak_node_and_step_leave_the_where_out(tmp_path, capsys, wide):
    p = memory_profile()
    p.memory = [DeviceMemory("cuda:0", peak_bytes=2 * MiB)]
    p.tree.excl = {m: v for m, v in p.tree.excl.items() if not m.startswith("peak_live_bytes.")}
    write_profile(p, tmp_path, "run")
    assert main(["report", str(tmp_path)]) == 0
    memory = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory")]
    assert memory == ["memory (cuda:0): peak 2.0 MiB"]


def test_what_was_not_collected_is_said_with_why(tmp_path, capsys, wide):
    p = memory_profile()
    p.memory = []
    p.memory_missing = ["peak_live_bytes", "peak_live_bytes.gradient"]
    p.memory_note = "memory is read on the native capture path only"
    write_profile(p, tmp_path, "run")
    assert main(["report", str(tmp_path)]) == 0
    memory = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory")]
    assert memory == [
        "memory: not collected: peak_live_bytes, peak_live_bytes.gradient "
        "(memory is read on the native capture path only)"
    ]


def test_no_memory_no_line(tmp_path, capsys, wide):
    p = memory_profile()
    p.memory = []
    write_profile(p, tmp_path, "run")
    assert main(["report", str(tmp_path)]) == 0
    assert "memory" not in capsys.readouterr().out


def test_json_has_each_device_with_its_categories(tmp_path, capsys):
    write_profile(memory_profile(), tmp_path, "run")
    assert main(["report", str(tmp_path), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["profiles"]
    cuda, cpu = doc["memory"]
    assert set(cuda) == {*DEVICE_MEMORY_FIELDS, "peak_path", "categories"}
    assert cuda["device"] == "cuda:0" and cuda["peak_bytes"] == (8 + 9 + 16) * MiB + TEMPORARY
    assert (cuda["peak_step"], cuda["peak_phase"], cuda["held_at_peak_bytes"]) == (
        3,
        "backward",
        24 * MiB,
    )
    assert cuda["timeline_t_ns"] == [0, 1000] and cuda["timeline_bytes"] == [24 * MiB, 36 * MiB]
    assert cuda["peak_path"] == ["backward", "0 (Linear)", "aten::addmm [backward]"]
    assert cuda["categories"] == {
        "parameter": 8 * MiB,
        "gradient": 0,
        "optimizer_state": 16 * MiB,
        "saved_for_backward": 9 * MiB,
        "temporary": TEMPORARY,
        "input": 0,
    }
    assert cpu["categories"] == {**dict.fromkeys(cuda["categories"], 0), "input": MiB}
    assert cpu["peak_path"] == ["dataloader", "data.py:9 __next__"] and cpu["peak_step"] == -1
    assert doc["memory_missing"] == [] and doc["memory_note"] == ""


@pytest.mark.parametrize(
    "metric, rows",
    [
        (
            "peak_live_bytes.saved_for_backward",
            [
                ["100.0%", "9.0 MiB", "0 B", "forward"],
                ["100.0%", "9.0 MiB", "0 B", "train.py:12 train_step"],
                ["100.0%", "9.0 MiB", "0 B", "0 (Linear)"],
                ["100.0%", "9.0 MiB", "9.0 MiB", "aten::addmm"],
            ],
        ),
        (
            "peak_live_bytes@cpu",
            [
                ["100.0%", "1.0 MiB", "0 B", "dataloader"],
                ["100.0%", "1.0 MiB", "1.0 MiB", "data.py:9 __next__"],
            ],
        ),
    ],
)
def test_memory_metrics_print_in_binary_units(tmp_path, capsys, wide, metric, rows):
    write_profile(memory_profile(), tmp_path, "run")
    assert main(["report", str(tmp_path), "--metric", metric]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.lstrip().startswith("% window"))
    assert out[head].split() == ["%", "window", "incl", metric, "excl", metric, "context"]
    assert [cells(line) for line in out[head + 1 :]] == rows


def test_peak_live_bytes_sorts_by_the_share_of_the_peak(tmp_path, capsys, wide):
    write_profile(memory_profile(), tmp_path, "run")
    assert main(["report", str(tmp_path), "--metric", "peak_live_bytes", "--depth", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.lstrip().startswith("% window"))
    assert [cells(line) for line in out[head + 1 :]] == [
        ["47.1%", "17.0 MiB", "0 B", "forward"],
        ["44.3%", "16.0 MiB", "0 B", "optimizer"],
        ["8.6%", "3.1 MiB", "0 B", "backward"],
    ]


def test_diff_compares_peaks_as_they_are_not_per_step(tmp_path, capsys, wide):
    a = write_profile(memory_profile(), tmp_path / "a")
    b = write_profile(memory_profile(saved=18 * MiB), tmp_path / "b")
    assert main(["diff", str(a), str(b), "--metric", "peak_live_bytes", "--json"]) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    # two steps each side: a peak is one moment's bytes, never halved
    assert change["path"] == ["forward", "train.py:12 train_step", "0 (Linear)", "aten::addmm"]
    assert (change["a_ns"], change["b_ns"], change["delta_ns"]) == (9 * MiB, 18 * MiB, 9 * MiB)
    assert change["spread_ns"] is None and change["significant"] is False
    assert main(["diff", str(a), str(b), "--metric", "peak_live_bytes.saved_for_backward"]) == 0
    out = capsys.readouterr().out
    assert "peak_live_bytes.saved_for_backward at each window's memory peak" in out
    row = next(line for line in out.splitlines() if "aten::addmm" in line)
    assert row.split()[:4] == ["+9.0", "MiB", "9.0", "MiB"] and "18.0 MiB" in row
    assert "\u0394/step" not in out and "per step" not in out
    # additive memory metrics stay per step: 12 MiB over 2 steps
    assert main(["diff", str(a), str(b), "--metric", "alloc_bytes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []


def test_a_trend_of_peak_bytes_is_each_windows_peak_not_per_step(tmp_path, capsys, wide):
    later = memory_profile(saved=18 * MiB)
    later.steps = (5, 7)
    write_profile(memory_profile(), tmp_path, "run")
    write_profile(later, tmp_path, "run")
    path = " \u203a ".join(["forward", "train.py:12 train_step", "0 (Linear)", "aten::addmm"])
    argv = ["report", str(tmp_path), "--trend", path, "--metric", "peak_live_bytes"]
    assert main([*argv, "--json"]) == 0
    (trend,) = json.loads(capsys.readouterr().out)["trend"]
    assert [p["value"] for p in trend["trend"]["points"]] == [9 * MiB, 18 * MiB]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(peak_live_bytes at the peak, share of the window)" in out and "per step" not in out
