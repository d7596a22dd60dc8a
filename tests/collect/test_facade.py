"""The collector facade (native or reference) and the leak guard; its constants
are checked in ``test_contract_constants.py``."""

from __future__ import annotations

import logging
import os
import threading

from dc_core.collect import collector as collector_mod
from dc_core.collect import reference
from dc_core.collect.ownfiles import profiler_files, skip_profiler_files
from tests.collect.test_collector import Snap, lib_call
from tests.conftest import _leftovers


def test_create_collector_prefers_native_when_it_imports():
    made = collector_mod.create_collector()
    native = collector_mod.native_available()
    assert type(made).__module__ == ("dc_core._native" if native else "dc_core.collect.reference")
    assert isinstance(
        collector_mod.create_collector(prefer_native=False, max_nodes=5), reference.Collector
    )


def test_missing_native_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(collector_mod, "_native_module", lambda: (None, "ImportError: no _native"))
    collector_mod._warn_fallback.cache_clear()
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        made = [collector_mod.create_collector(max_nodes=7) for _ in range(3)]
    assert all(isinstance(c, reference.Collector) for c in made)
    assert [r.getMessage() for r in caplog.records] == [
        "native collector unavailable (ImportError: no _native); using the pure-Python reference collector"
    ]
    collector_mod._warn_fallback.cache_clear()


def test_skip_profiler_files_hides_the_profilers_own_frames():
    c = collector_mod.create_collector(prefer_native=False)
    skip_profiler_files(c)
    core_dir = os.path.dirname(reference.__file__)
    frames = [Snap(c).frame(i) for i in lib_call(c.python_frames)]
    assert frames[-2].name == test_skip_profiler_files_hides_the_profilers_own_frames.__qualname__
    assert not any(f.file.startswith(core_dir + os.sep) for f in frames)


def test_demo_workloads_count_as_user_code():
    files = profiler_files()
    assert any(f.endswith("dc_core/record/session.py") for f in files)
    assert not any(f.endswith(("dc_core/demo/workload.py", "dc_torch/demo.py")) for f in files)
    # the command is ours, its workload is not
    assert any(f.endswith("dc_core/cli/demo.py") for f in files)


def test_guard_sees_a_sampler_left_running(make_collector):
    before = set(threading.enumerate())
    c = make_collector()
    c.start_sampler(50)
    assert _leftovers([c], before)
    c.stop_sampler()
    assert _leftovers([c], before) == []


def test_regression_console_script_frame_showed_when_invoked_by_a_relative_path(
    monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [".venv/bin/deepcontext", "demo"])
    assert str(tmp_path / ".venv/bin/deepcontext") in profiler_files()
