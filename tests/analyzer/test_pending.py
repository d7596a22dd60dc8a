"""A window is written without its findings, marked pending with the session's
thresholds; every reader (report, JSON, tab, ``deepcontext analyze``) gets
the findings the session's thresholds give, and the training thread never
runs the analyzer."""

from __future__ import annotations

import json
import time

from dc_core import analyzer
from dc_core.analyzer import findings_of
from dc_core.cli import main
from dc_core.record.session import Session
from dc_core.store.logdir import read_profile
from dc_core.store.profile import decode, encode, mark_pending
from tests.analyzer.helpers import MS, line, profile


def _loader_bound(tmp_path, monkeypatch, **config) -> str:
    """Two steps whose dataloader takes most of each step, through a real
    session; the analyzer must not run meanwhile."""

    def refused(*args, **kwargs):
        raise AssertionError("the analyzer ran on the training thread")

    monkeypatch.setattr(analyzer, "analyze", refused)
    session = Session(
        logdir=str(tmp_path),
        run="exp",
        steps={"start": 0, "count": 2},
        cpu_sampling_hz=0,
        framework="python",
        **config,
    )
    for step in range(2):
        session.step_begin(step)
        with session.phase("dataloader"):
            time.sleep(0.03)
        with session.phase("forward"):
            time.sleep(0.002)
        session.step_end(step)
    session.close()
    monkeypatch.undo()
    (path,) = session.written
    return str(path)


def test_a_window_is_written_pending_and_its_readers_analyse_it(tmp_path, monkeypatch):
    path = _loader_bound(tmp_path, monkeypatch)
    stored = read_profile(path)
    assert stored.findings == [] and stored.analysis_pending and stored.analyzer_overrides == {}
    found = findings_of(stored)
    assert "dataloader_bottleneck" in [f["rule"] for f in found]
    assert findings_of(stored) is found  # memoised
    assert stored.analysis_pending and stored.findings == []  # what was read is left as it was read


def test_the_sessions_thresholds_reach_the_reader(tmp_path, monkeypatch, capsys):
    path = _loader_bound(tmp_path, monkeypatch, analyzer={"dataloader_bottleneck.enabled": 0})
    stored = read_profile(path)
    assert stored.analyzer_overrides == {"dataloader_bottleneck.enabled": 0}
    assert "dataloader_bottleneck" not in [f["rule"] for f in findings_of(read_profile(path))]
    assert main(["report", str(tmp_path), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["profiles"]
    # found without the override
    assert "dataloader_bottleneck" not in [f["rule"] for f in doc["findings"]]


def test_the_report_prints_a_pending_windows_findings(tmp_path, monkeypatch, capsys):
    _loader_bound(tmp_path, monkeypatch)
    assert main(["report", str(tmp_path)]) == 0
    assert "dataloader_bottleneck" in capsys.readouterr().out


def test_analyze_stores_the_findings_with_the_sessions_thresholds_and_clears_the_marker(
    tmp_path, monkeypatch
):
    plain = _loader_bound(tmp_path / "plain", monkeypatch)
    quiet = _loader_bound(
        tmp_path / "quiet", monkeypatch, analyzer={"dataloader_bottleneck.enabled": 0}
    )
    assert (
        main(["analyze", str(tmp_path / "plain")]) == 0
        and main(["analyze", str(tmp_path / "quiet")]) == 0
    )
    stored = {name: read_profile(path) for name, path in (("plain", plain), ("quiet", quiet))}
    assert [f["rule"] for f in stored["plain"].findings] == ["dataloader_bottleneck"]
    assert stored["quiet"].findings == []
    for p in stored.values():
        assert not p.analysis_pending and p.analyzer_overrides == {}
    monkeypatch.setattr(analyzer, "analyze", lambda *a, **k: [{"rule": "again"}])
    assert findings_of(stored["quiet"]) == []  # analysed and stored: nothing left to do


def test_damaged_overrides_fall_back_to_the_defaults_with_a_warning(caplog):
    p = profile(
        ("dataloader", (line("__getitem__", "d.py:5"), f"aten::randn @cpu_time_ns={40 * MS}")),
        ("forward", (line("train", "t.py:1"), f"aten::mm @cpu_time_ns={2 * MS}")),
    )
    mark_pending(p, {"dataloader_bottleneck.enabled": 0})
    # a damaged or foreign file
    p.analyzer_overrides = {"dataloader_bottleneck.no_such_threshold": 1.0}
    back = decode(encode(p), "w.pb")
    assert "dataloader_bottleneck" in [f["rule"] for f in findings_of(back)]
    assert "w.pb has unreadable analyzer overrides" in caplog.text


def test_an_analysis_that_fails_leaves_the_profile_readable_without_findings(
    tmp_path, monkeypatch, capsys, caplog
):
    path = _loader_bound(tmp_path, monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(analyzer, "analyze", broken)
    assert findings_of(read_profile(path)) == []
    assert "analyzer failed on" in caplog.text and path in caplog.text
    assert main(["report", str(tmp_path), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["profiles"]
    assert doc["findings"] == [] and doc["steps"] == [0, 2]
