"""The engine: thresholds and overrides, ordering, isolation of a broken rule,
findings stored through the profile file."""

import logging

import pytest

from dc_core import analyzer
from dc_core.analyzer import RULE_IDS, analyze
from dc_core.analyzer.thresholds import DEFAULTS, Thresholds
from dc_core.store.profile import decode, encode
from tests.analyzer.helpers import MS, line, profile, rules

ISSUE_RULES = {
    "hotspot",
    "backward_imbalance",
    "dtype_conversion",
    "layout_conversion",
    "small_ops",
    "unfused_norm",
    "host_sync",
    "optimizer_unfused",
    "dataloader_bottleneck",
    "gpu_idle",
    "step_outlier",
    "low_gpu_utilization",
    "cpu_bottleneck",
    "io_bottleneck",
    "batch_size",
    "memory_growth",
    "allocator_fragmentation",
    "activation_memory",
    "optimizer_state_memory",
    "load_imbalance",
    "initialization_time",
    "share_trend",
    "exposed_communication",
}


def _loader_heavy():
    return profile(
        ("forward", (line("train", "t.py:1"), f"aten::mm @cpu_time_ns={50 * MS}")),
        ("dataloader", (line("__getitem__", "d.py:5"), f"aten::randn @cpu_time_ns={15 * MS}")),
    )


def test_every_rule_of_the_issue_exists_with_thresholds():
    assert set(RULE_IDS) == ISSUE_RULES
    assert {key.split(".")[0] for key in DEFAULTS} <= ISSUE_RULES | {"system"}


def test_overrides_change_a_threshold():
    p = _loader_heavy()  # 15 / 65 = 23 %
    assert "dataloader_bottleneck" in rules(analyze(p))
    assert "dataloader_bottleneck" not in rules(
        analyze(p, {"dataloader_bottleneck.min_share": 0.3})
    )
    assert "dataloader_bottleneck" not in rules(analyze(p, {"dataloader_bottleneck.enabled": 0}))


def test_unknown_threshold_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="dataloader_bottleneck.min_share"):
        Thresholds({"dataloader_bottleneck.min_shar": 0.2})


def test_most_severe_first():
    p = _loader_heavy()
    p.init_ns = 700 * 10**9
    severities = [f["severity"] for f in analyze(p)]
    assert severities == sorted(severities, key=["critical", "warning", "info"].index)
    assert severities[0] == "critical" and "info" in severities


def test_a_broken_rule_is_skipped_and_logged(monkeypatch, caplog):
    def broken(window):
        raise RuntimeError("boom")

    monkeypatch.setitem(analyzer.RULES, "small_ops", broken)
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        found = analyze(_loader_heavy())
    assert "dataloader_bottleneck" in rules(found)
    assert "rule small_ops failed" in caplog.text


def test_findings_survive_the_profile_file():
    p = _loader_heavy()
    p.findings = analyze(p)
    back = decode(encode(p))
    assert back.findings == p.findings
    f = next(f for f in back.findings if f["rule"] == "dataloader_bottleneck")
    assert back.tree.node_frame(f["node"]).label() == f["path"][-1] == "d.py:5 __getitem__"


def test_empty_profile_gives_no_findings():
    assert analyze(profile(step_times=[])) == []


def test_op_name_understands_aten_torch_and_dunder_names():
    from dc_core.analyzer.base import op_name
    from dc_core.model.tree import Frame

    names = {
        "aten::index_put_": "index_put",
        "torch.Tensor.item": "item",
        "torch.cumprod": "cumprod",
        "CumprodBackward0": "cumprod",
        "torch.Tensor.__rmul__": "mul",
        "torch.Tensor.__pow__": "pow",
        "torch.Tensor.__truediv__": "div",
        "torch.Tensor.__bool__": "bool_scalar",
        "torch.Tensor.float": "float",
        "torch.Tensor.__float__": "float_scalar",
        "aten::_to_copy": "_to_copy",
        "torch._foreach_add_": "_foreach_add",
        "torch.nn.functional.rms_norm": "rms_norm",
        "torch.Tensor.__getitem__": "index",
    }
    assert {name: op_name(Frame("operator", name)) for name in names} == names
