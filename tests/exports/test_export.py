"""Exporters produce what the other tools read, with the tree's numbers."""

from __future__ import annotations

import gzip
import json

import pytest

from dc_core.cli import main
from dc_core.export import exporter, pprof_pb2
from dc_core.store.logdir import write_profile
from tests.store.test_files import make_profile


def test_chrome_trace_nests_children_inside_parents():
    doc = json.loads(exporter("chrome")(make_profile(), "cpu_time_ns"))
    events = [(e["ph"], e["name"], e["ts"]) for e in doc["traceEvents"] if e["ph"] in "BE"]
    # 100 ns in µs
    assert events == [
        ("B", "forward", 0),
        ("B", "t.py:3 step", 0),
        ("B", "aten::mm", 0),
        ("E", "aten::mm", 0.1),
        ("E", "t.py:3 step", 0.1),
        ("E", "forward", 0.1),
    ]
    mm_end = [e for e in doc["traceEvents"] if e["ph"] == "E"][0]
    assert mm_end["args"]["count"] == 3 and mm_end["args"]["cpu_time_ns"] == 100


def test_speedscope_events_nest_the_tree_by_inclusive_value():
    doc = json.loads(exporter("speedscope")(make_profile(), "cpu_time_ns"))
    frames = [f["name"] for f in doc["shared"]["frames"]]
    (prof,) = doc["profiles"]
    assert prof["type"] == "evented" and prof["unit"] == "nanoseconds" and prof["endValue"] == 100
    events = [(e["type"], frames[e["frame"]], e["at"]) for e in prof["events"]]
    assert events == [
        ("O", "forward", 0),
        ("O", "t.py:3 step", 0),
        ("O", "aten::mm", 0),
        ("C", "aten::mm", 100),
        ("C", "t.py:3 step", 100),
        ("C", "forward", 100),
    ]
    assert doc["shared"]["frames"][1] == {"name": "t.py:3 step", "file": "t.py", "line": 3}


def test_pprof_samples_leaf_first():
    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(exporter("pprof")(make_profile(), "cpu_time_ns")))
    strings = list(msg.string_table)
    assert strings[msg.sample_type[0].type] == strings[msg.default_sample_type] == "cpu_time_ns"
    assert msg.duration_nanos == 10 + 20 + 30  # the step times
    names = {f.id: strings[f.name] for f in msg.function}
    (sample,) = [s for s in msg.sample if s.value[0]]
    assert [names[i] for i in sample.location_id] == ["aten::mm", "t.py:3 step", "forward"]
    assert sample.value[0] == 100


def test_hatchet_literal_has_inclusive_and_exclusive():
    (forward,) = json.loads(exporter("hatchet")(make_profile(), "cpu_time_ns"))
    assert forward["frame"] == {"name": "forward", "type": "phase", "file": "", "line": 0}
    assert forward["metrics"]["cpu_time_ns (inc)"] == 100 and forward["metrics"]["cpu_time_ns"] == 0
    # Hatchet's default column
    assert forward["metrics"]["time (inc)"] == 100 and forward["metrics"]["time"] == 0
    (mm,) = forward["children"][0]["children"]
    assert mm["metrics"]["time"] == 100 and mm["metrics"]["count (inc)"] == 3


def test_cli_export_writes_one_file_per_profile(tmp_path, capsys):
    write_profile(make_profile(0), tmp_path / "logs")
    write_profile(make_profile(1), tmp_path / "logs")
    assert (
        main(
            [
                "export",
                str(tmp_path / "logs"),
                "--format",
                "speedscope",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["run-rank0-steps5-7.speedscope.json", "run-rank1-steps5-7.speedscope.json"]


def test_pprof_keeps_the_innermost_frames_of_a_deep_path():
    from dc_core.export.pprof import MAX_STACK
    from tests.reliability.test_readers import chain_profile

    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(exporter("pprof")(chain_profile(300), "cpu_time_ns")))
    strings = list(msg.string_table)
    names = {f.id: strings[f.name] for f in msg.function}
    deepest = msg.sample[-1]  # preorder: the last is the deepest frame
    assert len(deepest.location_id) == MAX_STACK == 128
    assert [names[i] for i in deepest.location_id[:2]] == ["deep.py:300 f299", "deep.py:299 f298"]
    assert len(msg.sample) == 300 + 150  # every node with a value: the chain and its operators


def test_exporters_take_a_metric_the_profile_lacks():
    """pprof raised KeyError for a metric the profile has no column of."""
    for fmt in ("chrome", "speedscope", "pprof", "hatchet"):
        assert exporter(fmt)(make_profile(), "flops")
    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(exporter("pprof")(make_profile(), "flops")))
    assert (
        list(msg.string_table)[msg.sample_type[0].type]
        == "flops"
        == list(msg.string_table)[msg.default_sample_type]
    )
    assert all(s.value[0] == 0 for s in msg.sample)


def test_export_help_describes_logdir_and_rank(capsys):
    with pytest.raises(SystemExit) as done:
        main(["export", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "logdir directory holding DeepContext profiles (searched recursively)" in text
    assert "--rank N export only rank N's profiles" in text
    assert "default sample type (pprof)" in text
