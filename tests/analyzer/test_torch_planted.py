"""End to end with dc_torch: planted problems are found at the right place,
the healthy loop stays quiet. Findings are the ones a reader of the file gets:
the session marks each window pending, with its thresholds."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("dc_torch.loop")

from dc_core.analyzer import analyze
from dc_core.cli import main
from dc_core.model.opnames import op_name
from dc_core.store.logdir import read_profile
from tests.analyzer import planted
from tests.analyzer.helpers import only


@pytest.fixture(autouse=True)
def both_capture_paths(capture_path: str) -> str:
    """The rules read operator names of both capture paths (``aten::linear``, ``torch.nn.functional.linear``)."""
    return capture_path


def _one(profiles):
    assert len(profiles) == 1, profiles
    return profiles[0]


def _path_has(finding, *parts):
    text = " | ".join(finding["path"])
    return all(part in text for part in parts)


def _at(findings, rule, *parts):
    """The finding of ``rule`` whose path names ``parts``. Other findings of the
    rule may exist: wall-clock times on a busy shared host are noisy."""
    found = [f for f in findings if f["rule"] == rule and _path_has(f, *parts)]
    assert len(found) == 1, [f for f in findings if f["rule"] == rule]
    return found[0]


@pytest.mark.slow
def test_healthy_mlp_gets_no_warning(tmp_path):
    p = _one(planted.run_healthy(tmp_path))
    loud = [f for f in p.findings if f["severity"] != "info"]
    assert loud == [], loud
    # it is analysed, not skipped: the heaviest operator is the linear layers' backward
    (hot,) = [f for f in p.findings if f["rule"] == "hotspot"]
    assert op_name(hot["evidence"]["operators"][0]["operator"].split(" ")[0]) == "linear"


@pytest.mark.parametrize("mode", ["lightweight", "comprehensive"])
def test_a_linear_over_few_rows_has_no_backward_imbalance(tmp_path, mode):
    """Regression: a Linear(4096, 4096) over 4 rows took 6.5-7.8x its forward
    in backward (its fresh 64 MiB weight gradient page-faults each step), and
    its line was told to check the backward formula of aten::linear."""
    p = _one(planted.run_few_rows(tmp_path, mode))
    assert [f for f in p.findings if f["rule"] == "backward_imbalance"] == []
    # analysed, not skipped: the linears are where the step goes
    (hot,) = [f for f in p.findings if f["rule"] == "hotspot"]
    assert op_name(hot["evidence"]["operators"][0]["operator"].split(" ")[0]) == "linear"


def test_slow_getitem_is_the_dataloader_bottleneck(tmp_path):
    p = _one(planted.run_slow_getitem(tmp_path))
    f = only(p.findings, "dataloader_bottleneck")
    assert f["path"][0] == "dataloader" and f["path"][-1].endswith("SlowDataset.__getitem__")
    assert f["evidence"]["share"] >= 0.5 and f["severity"] == "critical"
    assert p.tree.node_frame(f["node"]).name == "SlowDataset.__getitem__"


def test_planted_model_problems_are_found_where_they_are(tmp_path):
    p = _one(planted.run_planted_model(tmp_path))
    found = p.findings

    cumprod = _at(found, "backward_imbalance", "decay_weights", "cumprod")
    assert cumprod["path"][0] == "backward"
    assert cumprod["evidence"]["ratio"] >= 3 and "cumsum" in cumprod["suggestion"]

    casts = _at(found, "dtype_conversion", "ping_pong")
    # named as called (Tensor.float, Tensor.half) on the Python path, as ATen runs them (aten::to) natively
    assert casts["evidence"]["operators"] in (
        ["torch.Tensor.float", "torch.Tensor.half"],
        ["aten::to"],
    )
    assert casts["evidence"]["per_step"] == 24  # 12 casts forward, and each one's backward copy

    norm = _at(found, "unfused_norm", "norm (RMSNorm)")
    assert norm["path"][-1].endswith("RMSNorm.forward")
    assert {"pow", "mean", "rsqrt", "mul"} <= set(norm["evidence"]["operators"])

    # the loop's .item() once per step: on a CPU-only run there is no device to wait for
    syncs = [f for f in found if f["rule"] == "host_sync"]
    if "cuda" in p.env:  # a machine with a GPU (the model still runs on the CPU)
        (sync,) = syncs
        assert sync["path"][-1] in ("torch.Tensor.item", "aten::item") and sync["path"][
            -2
        ].endswith("run_planted_model")
        assert sync["evidence"]["per_step"] == 1.0 and sync["severity"] == "info"
    else:
        assert "torch" in p.env and syncs == []

    # the stored node is the one the path names
    for f in (cumprod, casts, norm):
        assert p.tree.node_frame(f["node"]).label() == f["path"][-1]


def test_slow_rank_is_named_with_its_extra_work(tmp_path, capsys):
    paths = planted.run_ranks(tmp_path)
    assert main(["analyze", str(tmp_path)]) == 0
    profiles = [read_profile(path) for path in paths]
    imbalance = [[f for f in p.findings if f["rule"] == "load_imbalance"] for p in profiles]
    steps_ms = {p.rank: [round(t / 1e6, 1) for t in p.step_times_ns] for p in profiles}
    assert [len(f) for f in imbalance] == [0, 1, 0], steps_ms
    f = imbalance[1][0]
    # ~8x the work planted; named by work, which a loaded host cannot invert
    assert f["evidence"]["rank"] == 1 and f["evidence"]["measure"] == "work", (
        f["message"],
        steps_ms,
    )
    assert f["evidence"]["ratio"] >= 2, (f["message"], steps_ms)
    assert _path_has(f, "straggler_work")
    assert "rank 1" in capsys.readouterr().out


def test_findings_recomputed_match_the_stored_ones(tmp_path):
    p = _one(planted.run_slow_getitem(tmp_path))
    assert [f["rule"] for f in analyze(p) if f["severity"] != "info"] == [
        f["rule"] for f in p.findings if f["severity"] != "info"
    ]


def test_a_device_move_and_a_same_dtype_copy_are_not_dtype_conversions(tmp_path):
    torch = pytest.importorskip("torch")
    import dc_torch

    x = torch.randn(1024, 1024)
    with dc_torch.profile(logdir=str(tmp_path / "moves"), steps={"start": 0, "count": 3}) as prof:
        for _ in range(3):
            copies = [x.cpu()]  # same dtype, same device
            for _ in range(4):
                copies.append(x.to("cpu", copy=True))
            prof.step()
    moves = read_profile(prof.written[0])
    assert [f for f in planted.findings_of(moves) if f["rule"] == "dtype_conversion"] == []
    detail = {
        moves.tree.node_frame(n).detail
        for n in range(len(moves.tree))
        if op_name(moves.tree.node_frame(n).name) == "to"
    }
    assert detail == {"device"}, detail
    with dc_torch.profile(logdir=str(tmp_path / "casts"), steps={"start": 0, "count": 3}) as prof:
        for _ in range(3):
            casts = [x.double()]
            for _ in range(4):
                casts.append(x.to(torch.float64))
            prof.step()
    casts_profile = read_profile(prof.written[0])
    (f,) = [f for f in planted.findings_of(casts_profile) if f["rule"] == "dtype_conversion"]
    assert f["evidence"]["calls"] == 15 and f["gain_ns"] > 0
    del copies, casts
