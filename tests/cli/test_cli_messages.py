"""What the CLI tells a user: one step-range convention, partial windows,
empty metrics, drop counters, what ``analyze`` writes, ``view`` on an empty
logdir, ``--version``."""

from __future__ import annotations

import importlib.metadata
import json
import re

import pytest

from dc_core import __version__
from dc_core.cli import main, version
from dc_core.cli.present import MONITOR_READINGS_CAP, describe_drops
from dc_core.cli.view import warn_if_empty
from dc_core.collect import reference
from dc_core.model.tree import tree_from_lists
from dc_core.model.window import window_label
from dc_core.record.session import Session
from dc_core.store.logdir import find_profiles, read_profile, write_profile
from dc_core.store.profile import Profile
from dc_core.tensorboard import overview, tables
from dc_core.tensorboard.params import Ref
from dc_core.tensorboard.store import Index


def cpu_profile(**fields) -> Profile:
    tree = tree_from_lists(("forward", ("python:step|t.py:3", "aten::mm @cpu_time_ns=100,count=3")))
    tree.excl["device_time_ns"] = [0] * len(tree)  # the column is there, without values (a CPU run)
    tree.units["device_time_ns"] = "ns"
    return Profile(
        **{"tree": tree, "steps": (5, 8), "step_times_ns": [10, 20, 30], "host": "h", **fields}
    )


def test_one_step_convention_header_json_and_tab(tmp_path, capsys):
    path = write_profile(cpu_profile(), tmp_path)
    assert path.name == "steps-5-7.pb"  # file names as before: first and last step
    assert main(["report", str(tmp_path)]) == 0
    assert "steps 5\u20137 \u00b7 mean step 20 ns" in capsys.readouterr().out
    assert main(["report", str(tmp_path), "--json"]) == 0
    # half-open, for tools
    assert json.loads(capsys.readouterr().out)["profiles"][0]["steps"] == [
        5,
        8,
    ]
    assert main(["analyze", str(tmp_path), "--dry-run"]) == 0
    assert "rank 0 steps 5\u20137" in capsys.readouterr().out
    index = Index(read_profile(path), Ref(".", 0, (5, 8)))
    assert tables.node_row(index, 0)["label"] == overview.window(index)["label"] == "steps 5\u20137"


def test_json_help_says_steps_are_half_open(capsys):
    for command in ("report", "analyze"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "half-open [first, end): [5, 8] is steps 5-7" in " ".join(
            capsys.readouterr().out.split()
        )


def test_a_loop_that_ends_inside_a_window_is_reported_partial(tmp_path, capsys):
    """Regression: a loop that stopped inside a window printed ``steps 5–6``
    with one step time recorded, as if the window were whole."""
    session = Session(
        logdir=str(tmp_path),
        steps={"start": 5, "count": 3},
        framework="python",
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    for step in range(6):  # prof.step() style: each step's end begins the next one
        session.step_begin(step)
        session.step_end(step)
    session.step_begin(6)
    session.close()
    (file,) = find_profiles(tmp_path)
    assert file.steps == (5, 7) and len(read_profile(file.path).step_times_ns) == 1
    assert main(["report", str(tmp_path)]) == 0
    assert (
        "steps 5\u20136 (partial: step 5 timed, of steps 5\u20137 planned)"
        in capsys.readouterr().out
    )
    index = Index(read_profile(file.path), Ref(".", 0, file.steps))
    assert (
        tables.node_row(index, 0)["label"]
        == "steps 5\u20136 (partial: step 5 timed, of steps 5\u20137 planned)"
    )


def test_window_label_counts_against_the_planned_window_when_recorded():
    partial = window_label((5, 7), [1, 2], (5, 8))
    assert partial == "steps 5\u20136 (partial: steps 5\u20136 timed, of steps 5\u20137 planned)"
    assert window_label((5, 8), [1, 2, 3], (5, 8)) == "steps 5\u20137"
    assert window_label((5, 6), [1]) == "step 5" and window_label((5, 8)) == "steps 5\u20137"


def test_a_metric_without_values_says_so(tmp_path, capsys):
    write_profile(cpu_profile(), tmp_path)
    assert main(["report", str(tmp_path), "--metric", "device_time_ns"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "note: this profile has no device_time_ns values (nothing to show); it has: cpu_time_ns, count"
        in out
    )
    assert "% window" not in out
    assert main(["report", str(tmp_path), "--metric", "nonsense"]) == 2
    assert "they have: count, cpu_time_ns" in capsys.readouterr().err


def test_drops_are_explained(tmp_path, capsys):
    write_profile(cpu_profile(drops={"samples": 17, "nodes": 2, "monitor": 0}), tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "dropped: 17 CPU samples lost or shallow: the sampler fell behind" in out
    assert (
        "dropped: 2 new call paths not added: the window's tree reached its cap of max_nodes nodes "
        "(default 500,000"
    ) in out
    assert "{'samples'" not in out and "monitor" not in out


def test_monitor_cap_is_the_collectors():
    import inspect

    assert (
        inspect.signature(reference.Collector).parameters["max_samples"].default
        == MONITOR_READINGS_CAP
    )
    native = pytest.importorskip("dc_core._native")
    default = re.search(r"max_samples: [^=,)]+= (\d+)", native.Collector.__init__.__doc__ or "")
    assert default and int(default[1]) == MONITOR_READINGS_CAP
    assert f"cap of {MONITOR_READINGS_CAP:,} readings" in describe_drops({"monitor": 3})[0]


def test_analyze_help_says_it_rewrites_the_files(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "REWRITE EACH PROFILE FILE in place" in text
    assert "--dry-run only print the findings: no profile file is rewritten" in text


def test_analyze_says_what_it_wrote(tmp_path, capsys):
    path = write_profile(cpu_profile(), tmp_path)
    assert main(["analyze", str(tmp_path)]) == 0
    assert "findings written into 1 profile file" in capsys.readouterr().out
    assert read_profile(path).steps == (5, 8)


def test_view_warns_about_a_logdir_without_profiles(tmp_path, capsys):
    assert warn_if_empty(str(tmp_path)) is True
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"warning: no DeepContext profiles under {str(tmp_path)!r} yet" in err
        and "starts anyway" in err
    )
    write_profile(cpu_profile(), tmp_path)
    assert warn_if_empty(str(tmp_path)) is False and capsys.readouterr().err == ""


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"deepcontext {version()}"
    try:
        assert version() == importlib.metadata.version("deepcontext")
    except importlib.metadata.PackageNotFoundError:
        assert version() == __version__


def test_reading_many_profiles_says_so_on_stderr_when_not_a_terminal(tmp_path, capsys):
    from dc_core.cli import common
    from dc_core.store.logdir import write_profile
    from tests.store.test_files import make_profile

    for rank in range(common.MANY_FILES):
        write_profile(make_profile(rank), tmp_path, "big")
    files, limit = common.list_logdir(str(tmp_path))
    profiles, errors = common.read_files(files, limit, where=str(tmp_path))
    assert len(profiles) == common.MANY_FILES and not errors
    assert f"reading {common.MANY_FILES} profiles under {tmp_path}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "origin, hint",
    [
        (
            {"url": "file:///src/deep%20context", "dir_info": {"editable": True}},
            "pip install -e '/src/deep context[jax]'",
        ),
        ({"url": "file:///src/dc", "dir_info": {}}, "pip install '/src/dc[jax]'"),
        (None, "pip install 'deepcontext[jax]'"),  # from an index: no record of a directory
    ],
)
def test_install_hints_follow_how_the_package_was_installed(monkeypatch, origin, hint):
    from dc_core.cli.common import install_hint

    class Installed:
        def read_text(self, name):
            return json.dumps(origin) if origin is not None and name == "direct_url.json" else None

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    assert install_hint("jax") == hint


def _window_with_a_slow_first_step(logdir, start: int) -> Profile:
    """Steps 0..start+3 of a loop whose first step sleeps 150 ms (its one-off
    costs) and the others ~1 ms; the window is steps start..start+3."""
    import time

    session = Session(
        logdir=str(logdir),
        steps={"start": start, "count": 4},
        framework="python",
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    for step in range(start + 4):
        session.step_begin(step)
        time.sleep(0.15 if step == 0 else 0.001)
        session.step_end(step)
    session.close()
    (file,) = find_profiles(logdir)
    return read_profile(file.path)


def test_a_first_step_of_the_process_is_shown_as_its_one_off_costs(tmp_path, capsys, monkeypatch):
    from dc_core.analyzer import findings_of

    profile = _window_with_a_slow_first_step(tmp_path, start=0)
    assert profile.first_step == 0 and len(profile.step_times_ns) == 4
    monkeypatch.setenv("COLUMNS", "200")  # the note on one line
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if l.startswith("step 0 took")]
    assert re.fullmatch(
        r"step 0 took 15\d\.\d\d ms, \d+x the median of the others: a process's first step pays "
        r"one-off costs \(imports, first calls, warm-up\); the mean step leaves it out",
        line,
    ), line
    mean_ms = float(re.search(r"mean step ([\d.]+) ms", out).group(1))
    assert mean_ms < 20  # the three ~1 ms steps, not 150 ms among them
    assert not [f for f in findings_of(profile) if f["rule"] == "step_outlier"]
    capsys.readouterr()
    assert main(["report", str(tmp_path), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["profiles"]
    assert doc["one_off_first_step_ns"] > 140e6


def test_a_slow_first_step_of_a_later_window_is_no_one_off(tmp_path, capsys):
    profile = _window_with_a_slow_first_step(tmp_path, start=1)  # step 0 ran before the window
    assert profile.first_step == 0 and profile.steps[0] == 1
    assert main(["report", str(tmp_path)]) == 0
    assert "one-off" not in capsys.readouterr().out
