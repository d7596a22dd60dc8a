"""``deepcontext analyze`` and the findings renderer."""

import io
import json

import pytest
from rich.console import Console

from dc_core.cli import analyze as analyze_cmd
from dc_core.cli import main
from dc_core.cli.findings import render_findings, short_path
from dc_core.store.logdir import find_profiles, read_profile, write_profile
from tests.analyzer.helpers import MS, line, profile


def _write(tmp_path, rank=0, loader_ms=15):
    p = profile(
        ("forward", (line("train", "t.py:1"), f"aten::mm @cpu_time_ns={50 * MS}")),
        (
            "dataloader",
            (line("__getitem__", "d.py:5"), f"aten::randn @cpu_time_ns={loader_ms * MS}"),
        ),
        rank=rank,
        host="node1",
        run="exp",
    )
    return write_profile(p, tmp_path, "exp")


def test_analyze_rewrites_the_profiles_with_findings(tmp_path, capsys):
    path = _write(tmp_path)
    assert read_profile(path).findings == []
    assert main(["analyze", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dataloader_bottleneck" in out and "d.py:5 __getitem__" in out
    stored = read_profile(path).findings
    assert [f["rule"] for f in stored][0] == "dataloader_bottleneck"
    # replaced in place, no temporaries left
    assert [f.path for f in find_profiles(tmp_path)] == [path]
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_analyze_set_overrides_and_json(tmp_path, capsys):
    path = _write(tmp_path)
    assert (
        main(["analyze", str(tmp_path), "--json", "--set", "dataloader_bottleneck.min_share=0.5"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert "dataloader_bottleneck" not in [f["rule"] for f in doc["profiles"][0]["findings"]]
    assert doc["profiles"][0]["file"] == str(path)


def test_analyze_dry_run_leaves_files_alone(tmp_path, capsys):
    path = _write(tmp_path)
    before = path.read_bytes()
    assert main(["analyze", str(tmp_path), "--dry-run"]) == 0
    assert path.read_bytes() == before and "dataloader_bottleneck" in capsys.readouterr().out


def test_analyze_cross_rank_findings_go_to_the_slow_rank(tmp_path, capsys):
    paths = [_write(tmp_path, rank=r, loader_ms=80 if r == 1 else 15) for r in range(3)]
    assert main(["analyze", str(tmp_path)]) == 0
    rules = [[f["rule"] for f in read_profile(p).findings] for p in paths]
    assert ["load_imbalance" in r for r in rules] == [False, True, False]


def test_analyze_rejects_bad_thresholds(tmp_path, capsys):
    _write(tmp_path)
    assert main(["analyze", str(tmp_path), "--set", "nope"]) == 2
    assert main(["analyze", str(tmp_path), "--set", "dataloader_bottleneck.min_shar=1"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "known: dataloader_bottleneck.critical_share, dataloader_bottleneck.min_share" in err
    assert main(["analyze", str(tmp_path / "missing")]) == 2


def test_short_path_keeps_the_phase_and_the_users_last_frames():
    path = [
        "forward",
        "<frozen runpy>:88 _run_code",
        "train.py:1 <module>",
        "train.py:40 main",
        "train.py:30 step",
        "model.py:20 forward",
        "model.py:14 rmsnorm",
        "aten::pow",
    ]
    assert (
        short_path(path)
        == "forward › … › train.py:30 step › model.py:20 forward › model.py:14 rmsnorm › aten::pow"
    )
    assert short_path(["dataloader"]) == "dataloader" and short_path([]) == ""


def test_render_findings_shows_severity_rule_path_and_suggestion():
    buf = io.StringIO()
    render_findings(
        [
            {
                "rule": "host_sync",
                "severity": "warning",
                "message": "aten::item 1.0x per step",
                "suggestion": "keep values on the device",
                "path": ["other", "t.py:3 loop", "aten::item"],
                "evidence": {},
                "node": 3,
            }
        ],
        Console(file=buf, width=200, color_system=None),
    )
    text = buf.getvalue()
    assert "WARNING" in text and "host_sync" in text and "aten::item 1.0x per step" in text
    assert "other › t.py:3 loop › aten::item" in text and "→ keep values on the device" in text


def test_render_findings_says_what_each_fix_saves_and_why():
    buf = io.StringIO()
    base = {"severity": "warning", "suggestion": "", "path": [], "evidence": {}, "node": -1}
    render_findings(
        [
            {
                **base,
                "rule": "optimizer_unfused",
                "message": "the optimizer",
                "gain_ns": 6_340_000,
                "gain_basis": "the optimizer's Python",
            },
            {
                **base,
                "rule": "small_ops",
                "message": "tiny ops",
                "gain_ns": 420_000,
                "gain_basis": "the loop",
            },
            {
                **base,
                "rule": "memory_growth",
                "message": "RSS grew",
                "gain_ns": None,
                "gain_basis": "memory, not time",
            },
        ],
        Console(file=buf, width=200, color_system=None),
    )
    lines = [line.strip() for line in buf.getvalue().splitlines()]
    assert "saves ≈ 6.3 ms per step: the optimizer's Python" in lines
    assert "saves ≈ 420 µs per step: the loop" in lines
    assert "saves none estimated: memory, not time" in lines


def test_findings_rank_by_severity_then_by_their_saving():
    from dc_core.analyzer import sort_findings

    def f(rule, severity, gain):
        return {"rule": rule, "severity": severity, "gain_ns": gain}

    ranked = sort_findings(
        [
            f("hotspot", "info", None),
            f("small_ops", "warning", 2),
            f("step_outlier", "warning", None),
            f("dtype_conversion", "warning", 9),
            f("dataloader_bottleneck", "critical", 1),
        ]
    )
    assert [x["rule"] for x in ranked] == [
        "dataloader_bottleneck",
        "dtype_conversion",
        "small_ops",
        "step_outlier",
        "hotspot",
    ]


def test_parse_overrides():
    assert analyze_cmd.parse_overrides(
        ["dataloader_bottleneck.min_share=1", "hotspot.enabled = 0"]
    ) == {"dataloader_bottleneck.min_share": 1.0, "hotspot.enabled": 0.0}


@pytest.mark.parametrize(
    "item",
    [
        "dataloader_bottleneck.min_share=nan",
        "dataloader_bottleneck.min_share=-1",
        "dataloader_bottleneck.min_share=inf",
        "nope.min_share=1",
    ],
)
def test_set_checks_thresholds_as_the_config_does(item, tmp_path, capsys):
    """Regression: ``--set rule.threshold=nan`` reached the analyzer, which took NaN."""
    _write(tmp_path)
    assert main(["analyze", str(tmp_path), "--set", item]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--set" in err and item.partition("=")[0].partition(".")[0] in err


def test_analyze_many_ranks_streams_and_stores_the_outlier_in_its_file(tmp_path, capsys):
    import random

    from tests.ensemble.test_outliers import ddp_rank

    rng = random.Random(3)
    paths = [write_profile(ddp_rank(rank, 9, rng), tmp_path, "job") for rank in range(16)]
    assert main(["analyze", str(tmp_path)]) == 0
    stored = [[f for f in read_profile(p).findings if f["rule"] == "load_imbalance"] for p in paths]
    assert [len(f) for f in stored] == [0] * 9 + [1] + [0] * 6
    (f,) = stored[9]
    assert f["path"][:3] == ["forward", "train.py:40 train", "blocks.0.mlp"] and f["evidence"][
        "outlier_ranks"
    ] == [9]
    assert (
        paths[0].parent.parent / ".index"
    ).is_dir()  # read through the cross-rank index, as report does
    assert "rank 9 is an outlier among 16 ranks" in capsys.readouterr().out


def test_a_memory_findings_saving_reads_in_bytes_at_the_peak():
    from dc_core.cli.findings import gain_text

    finding = {
        "rule": "activation_memory",
        "severity": "info",
        "message": "m",
        "gain_ns": None,
        "gain_basis": "memory, not time",
        "evidence": {"gain_bytes": 96 * 2**20},
    }
    assert gain_text(finding) == "\u2248 96.0 MiB at the peak"
    assert gain_text({**finding, "evidence": {}}) == "none estimated"
