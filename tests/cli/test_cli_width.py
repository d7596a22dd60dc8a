"""Output fits ``COLUMNS``, also when piped: long names cut in the middle,
findings wrapped under themselves, file paths never broken."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dc_core.cli import main
from dc_core.cli.common import PIPED_WIDTH, middle_truncate, output_width
from dc_core.cli.findings import render_findings
from dc_core.model.tree import tree_from_lists
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile

LONG = "module:model.encoder.layers.11.self_attention.output_projection.dense_with_a_very_long_name (Linear)"
FINDING = {
    "rule": "hotspot",
    "severity": "warning",
    "node": -1,
    "evidence": {},
    "message": "model.encoder.layers.11.self_attention takes 61.2% of the window (forward 1.2 ms, "
    "backward 2.4 ms) across every profiled step of this run",
    "path": [
        "forward",
        "train.py:10 main",
        "train.py:20 step",
        "model.py:30 Encoder.forward",
        "model.py:40 Layer.forward",
        "model.encoder.layers.11.self_attention (SelfAttention)",
    ],
    "suggestion": "look at the heaviest operators under this line; fuse the projections or use "
    "scaled_dot_product_attention so one kernel does the work of several",
}


def deep_tree():
    chain = "aten::addmm @cpu_time_ns=500"
    for depth in range(14, 0, -1):
        chain = (f"python:f{depth}|/src/project/model.py:{depth}", chain)
    return tree_from_lists(
        ("forward", ("python:main|/src/train.py:1", (LONG + " @cpu_time_ns=5", chain)))
    )


@pytest.fixture()
def logdir(tmp_path):
    profile = Profile(
        tree=deep_tree(),
        steps=(5, 8),
        step_times_ns=[1_000_000] * 3,
        run="r",
        host="h",
        findings=[FINDING],
        drops={"samples": 17},
    )
    write_profile(profile, tmp_path, "r")
    bad = (
        tmp_path
        / "r"
        / "plugins"
        / "deepcontext"
        / ("1-" + "averyveryverylonghostname" * 3)
        / "steps-5-7.pb"
    )
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00garbage")
    return tmp_path, str(bad)


def test_output_width_honours_columns_even_when_piped():
    piped = io.StringIO()
    assert output_width(piped, {"COLUMNS": "80"}) == 80
    assert output_width(piped, {}) == PIPED_WIDTH
    assert output_width(piped, {"COLUMNS": "junk"}) == PIPED_WIDTH


def test_middle_truncate_keeps_start_and_end():
    cut = middle_truncate("model.blocks.3.attn (SelfAttention)", 20)
    assert cut == "model.bloc\u2026ttention)" and len(cut) == 20
    assert middle_truncate("short", 20) == "short"


def test_report_at_80_columns_fits_and_cuts_long_names(logdir, capsys, monkeypatch):
    root, bad = logdir
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", str(root), "--min-percent", "0", "--limit", "100"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    too_long = [line for line in lines if len(line) > 80]
    assert all(bad in line for line in too_long), too_long  # only the line naming a whole path
    assert any(line.startswith("skipped ") and line.rstrip().endswith(bad + ":") for line in lines)
    (row,) = [line for line in lines if "model.encoder" in line and line.lstrip()[:1].isdigit()]
    name = row.split("  ")[-1].strip()
    assert (
        "\u2026" in name and name.startswith("model.encoder.") and name.endswith("_name (Linear)")
    )
    assert "aten::addmm" in out and "f14" in out  # the deepest rows keep their names
    assert any(line.startswith("dropped: 17 CPU samples") for line in lines)
    # the finding wraps under its own text, not at column 0
    start = lines.index("findings (1)")
    end = next(i for i, line in enumerate(lines) if line.startswith("skipped"))
    finding = lines[start + 1 : end]
    assert finding[0].startswith(" WARNING  hotspot  model.encoder")
    assert all(line.startswith(" " * 10) for line in finding[1:]), finding
    text = " ".join(" ".join(line.split()) for line in finding)
    assert (
        "so one kernel does the work of several" in text
        and "Layer.forward \u203a model.encoder" in text
    )


def test_render_findings_hangs_continuation_lines():
    buf = io.StringIO()
    render_findings([FINDING], Console(file=buf, width=60, color_system=None))
    lines = buf.getvalue().splitlines()[1:]
    assert lines[0].startswith(" WARNING  hotspot")
    assert all(line.startswith(" " * 10) for line in lines[1:]) and all(
        len(line) <= 60 for line in lines
    )
    at = [i for i, line in enumerate(lines) if line.startswith(" " * 10 + " at ")]
    arrow = [i for i, line in enumerate(lines) if line.startswith(" " * 10 + " \u2192 ")]
    assert at and arrow and all(lines[i].startswith(" " * 14) for i in range(at[0] + 1, arrow[0]))
