"""Exporters produce what the other tools read, with the tree's numbers."""

from __future__ import annotations

import gzip
import json

from dc_core.cli import main
from dc_core.export import exporter
from dc_core.export import pprof_pb2
from dc_core.logdir import write_profile
from tests.core.test_files import make_profile


def test_chrome_trace_nests_children_inside_parents():
    doc = json.loads(exporter("chrome")(make_profile(), "cpu_time_ns"))
    events = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    mm, step = events["aten::mm"], events["t.py:3 step"]
    assert mm["dur"] == 0.1 and mm["args"]["count"] == 3  # 100 ns in µs
    assert step["ts"] <= mm["ts"] and mm["ts"] + mm["dur"] <= step["ts"] + step["dur"]


def test_speedscope_weights_are_exclusive_paths():
    doc = json.loads(exporter("speedscope")(make_profile(), "cpu_time_ns"))
    frames = [f["name"] for f in doc["shared"]["frames"]]
    (prof,) = doc["profiles"]
    assert prof["unit"] == "nanoseconds" and prof["weights"] == [100]
    assert [frames[i] for i in prof["samples"][0]] == ["forward", "t.py:3 step", "aten::mm"]


def test_pprof_samples_leaf_first():
    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(exporter("pprof")(make_profile(), "cpu_time_ns")))
    strings = list(msg.string_table)
    assert strings[msg.sample_type[0].type] == "cpu_time_ns"
    names = {f.id: strings[f.name] for f in msg.function}
    (sample,) = [s for s in msg.sample if s.value[0]]
    assert [names[i] for i in sample.location_id] == ["aten::mm", "t.py:3 step", "forward"]
    assert sample.value[0] == 100


def test_hatchet_literal_has_inclusive_and_exclusive():
    (forward,) = json.loads(exporter("hatchet")(make_profile(), "cpu_time_ns"))
    assert forward["frame"] == {"name": "forward", "type": "phase", "file": "", "line": 0}
    assert forward["metrics"]["cpu_time_ns (inc)"] == 100 and forward["metrics"]["cpu_time_ns"] == 0


def test_cli_export_writes_one_file_per_profile(tmp_path, capsys):
    write_profile(make_profile(0), tmp_path / "logs")
    write_profile(make_profile(1), tmp_path / "logs")
    assert main(["export", str(tmp_path / "logs"), "--format", "speedscope", "--out", str(tmp_path / "out")]) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["run-rank0-steps5-7.speedscope.json", "run-rank1-steps5-7.speedscope.json"]
