"""The ``deepcontext`` CLI: report (table and JSON), errors, demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dc_core.cli import main
from dc_core.demo.workload import train
from dc_core.store.logdir import write_profile
from tests.store.test_files import make_profile


@pytest.fixture(scope="module")
def demo_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("demo")
    train(logdir, steps=6, window=(1, 3))
    return logdir


def test_report_json_shape(demo_logdir, capsys):
    assert main(["report", str(demo_logdir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        set(doc) == {"version", "profiles", "errors"}
        and doc["version"] == 1
        and doc["errors"] == []
    )
    (profile,) = doc["profiles"]
    assert set(profile) == {
        "run",
        "rank",
        "host",
        "framework",
        "mode",
        "steps",
        "step_times_ns",
        "one_off_first_step_ns",
        "tree",
        "memory",
        "memory_missing",
        "memory_note",
        "communication",
        "findings",
    }
    assert profile["memory"] == [] and profile["memory_missing"] == []  # not collected
    assert (
        profile["steps"] == [1, 4]
        and len(profile["step_times_ns"]) == 3
        and profile["framework"] == "python"
    )
    root = profile["tree"]
    assert set(root) == {
        "kind",
        "name",
        "detail",
        "file",
        "line",
        "backward",
        "excl",
        "incl",
        "children",
    }

    def walk(node, path):
        yield path + [node["name"]], node
        for kid in node["children"]:
            yield from walk(kid, path + [node["name"]])

    nodes = {tuple(p[1:]): n for p, n in walk(root, [])}
    (grad_path,) = [p for p in nodes if p and p[-1] == "demo::grad"]
    grad = nodes[grad_path]
    assert grad_path[0] == "backward" and grad["backward"] is True and grad["kind"] == "operator"
    assert (
        grad["excl"]["count"] == 3
        and grad["incl"]["cpu_time_ns"] >= grad["excl"]["cpu_time_ns"] > 0
    )
    assert (
        root["incl"]["cpu_time_ns"]
        == sum(k["incl"]["cpu_time_ns"] for k in root["children"]) + root["excl"]["cpu_time_ns"]
    )


def test_report_table_shows_phases_and_lines(demo_logdir, capsys):
    assert main(["report", str(demo_logdir), "--min-percent", "0", "--limit", "1000"]) == 0
    out = capsys.readouterr().out
    for text in (
        "forward",
        "backward",
        "workload.py:",
        "demo::featurize",
        "demo::grad [backward]",
        "steps 1–3",
    ):
        assert text in out


def test_report_views_and_metric(demo_logdir, capsys):
    assert main(["report", str(demo_logdir), "--view", "flat", "--metric", "count", "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)["profiles"][0]["tree"]
    counts = {k["name"]: k["incl"]["count"] for k in tree["children"]}
    assert counts["demo::matvec"] == 3
    assert main(["report", str(demo_logdir), "--metric", "nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_missing_and_empty_logdir_exit_nonzero(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert str(tmp_path / "nope") in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "no DeepContext profiles" in capsys.readouterr().err


def test_bad_file_reported_others_kept(tmp_path, capsys):
    write_profile(make_profile(0), tmp_path)
    bad = write_profile(make_profile(1), tmp_path)
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["report", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["rank"] for p in doc["profiles"]] == [0]
    assert doc["errors"][0]["file"] == str(bad) and "corrupt" in doc["errors"][0]["message"]


def test_ranks_compared(tmp_path, capsys):
    for rank, scale in ((0, 1), (1, 3)):
        profile = make_profile(rank)
        profile.step_times_ns = [t * scale for t in profile.step_times_ns]
        write_profile(profile, tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "slowest rank: 1" in out and "top frames per rank" in out
    (mm_row,) = [line for line in out.splitlines() if "│ aten::mm" in line]
    cells = [c.strip() for c in mm_row.split("│") if c.strip()]
    assert cells == ["aten::mm", "100 ns", "100 ns"]  # inclusive time of aten::mm on ranks 0 and 1
    assert main(["report", str(tmp_path), "--rank", "1", "--json"]) == 0
    assert [p["rank"] for p in json.loads(capsys.readouterr().out)["profiles"]] == [1]


def test_python_m_dc_core_demo(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dc_core",
            "demo",
            "--workload",
            "python",
            "--logdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "demo::featurize" in result.stdout and "steps-3-6.pb" in result.stdout


def test_export_skips_a_profile_without_the_metric_and_goes_on(tmp_path, capsys):
    write_profile(make_profile(0), tmp_path / "logs")
    other = make_profile(1)
    other.tree.excl.pop("count")
    skipped = write_profile(other, tmp_path / "logs")
    assert (
        main(
            [
                "export",
                str(tmp_path / "logs"),
                "--format",
                "chrome",
                "--metric",
                "count",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert f"skipped {skipped}: it has no metric 'count'" in out
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["run-rank0-steps5-7.trace.json"]


@pytest.mark.parametrize("command", ["report", "export", "analyze"])
def test_reading_commands_take_a_size_cap(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--max-file-mb" in capsys.readouterr().out
