"""hotspot and backward_imbalance on literal trees."""

from dc_core.analyzer import analyze

from tests.analyzer.helpers import MS, line, only, profile, rules

TRAIN = line("train", "train.py:20")


def test_hotspot_names_the_heaviest_line_and_operator():
    p = profile(
        ("forward", (TRAIN,
            (line("attention", "model.py:40"), f"aten::bmm @cpu_time_ns={60 * MS},count=30"),
            (line("mlp", "model.py:55"), f"aten::addmm @cpu_time_ns={30 * MS},count=30"),
            (line("tiny", "model.py:70"), f"aten::add @cpu_time_ns={1 * MS},count=30"))),
        ("backward", (TRAIN, (line("attention", "model.py:40"), f"aten::bmm [backward] @cpu_time_ns={9 * MS},count=60"))),
    )
    found = [f for f in analyze(p) if f["rule"] == "hotspot"]
    lines = [f for f in found if f["evidence"]["kind"] == "line"]
    ops = [f for f in found if f["evidence"]["kind"] == "operator"]
    assert [f["path"][-1] for f in lines] == ["model.py:40 attention", "model.py:55 mlp"]  # tiny is < 5 %
    assert lines[0]["path"] == ["forward", "train.py:20 train", "model.py:40 attention"]
    assert lines[0]["evidence"]["forward_ns"] == 60 * MS and lines[0]["evidence"]["backward_ns"] == 9 * MS
    assert lines[0]["evidence"]["share"] == 0.69
    assert ops[0]["evidence"]["operator"] == "aten::bmm" and ops[0]["evidence"]["calls"] == 30
    assert all(f["severity"] == "info" for f in found)


def test_hotspot_line_shown_where_its_operators_run_with_their_phases():
    # An optimizer whose own frames are skipped bills its ops to the loop's line;
    # that line also sits above the whole backward pass, which must not decide
    # where the finding points nor count as the line's own backward time.
    layer = line("forward", "model.py:12")
    p = profile(
        ("forward", (TRAIN, (layer, f"aten::addmm @cpu_time_ns={40 * MS}"))),
        ("backward", (TRAIN, f"aten::sum [backward] @cpu_time_ns={MS}",
                      (layer, f"aten::mm [backward] @cpu_time_ns={40 * MS}"))),
        ("optimizer", (TRAIN, f"aten::mul_ @cpu_time_ns={12 * MS}", f"aten::add_ @cpu_time_ns={8 * MS}")),
    )
    (train,) = [f for f in analyze(p) if f["rule"] == "hotspot" and f["path"][-1] == "train.py:20 train"]
    assert train["path"] == ["optimizer", "train.py:20 train"]
    assert train["message"] == "train.py:20 train: 20.8% of the window (backward 1.0 ms, optimizer 20.0 ms)"
    assert train["evidence"]["optimizer_ns"] == 20 * MS and train["evidence"]["forward_ns"] == 0
    assert train["evidence"]["operators"] == ["aten::mul_", "aten::add_", "aten::sum"]


def test_hotspot_quiet_when_nothing_reaches_the_share():
    specs = [(line(f"f{i}", f"m.py:{i}"), f"aten::op{i} @cpu_time_ns={MS}") for i in range(40)]
    p = profile(("forward", (TRAIN, *specs)))
    assert "hotspot" not in rules(analyze(p))


def test_backward_imbalance_points_at_cumprod_in_its_helper():
    helper = line("decay_weights", "model.py:31")
    p = profile(
        ("forward", (TRAIN,
            (helper, f"aten::cumprod @cpu_time_ns={2 * MS},count=3"),
            (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={20 * MS},count=3"))),
        ("backward", (TRAIN,
            (helper, (f"aten::cumprod [backward] @cpu_time_ns={4 * MS},count=3", f"aten::mul @cpu_time_ns={14 * MS}")),
            (line("head", "model.py:50"), f"aten::addmm [backward] @cpu_time_ns={30 * MS},count=3"))),
    )
    f = only(analyze(p), "backward_imbalance")
    assert f["severity"] == "warning"
    assert f["path"] == ["backward", "train.py:20 train", "model.py:31 decay_weights", "aten::cumprod [backward]"]
    assert f["evidence"]["forward_ns"] == 2 * MS and f["evidence"]["backward_ns"] == 18 * MS
    assert f["evidence"]["ratio"] == 9.0 and f["evidence"]["operator"] == "aten::cumprod"
    assert "cumsum" in f["suggestion"]  # the known alternative for cumprod


def test_backward_imbalance_quiet_for_matmul_backward_twice_forward():
    # A linear layer's backward is two matmuls: 2x its forward, under the ratio.
    layer = line("forward", "model.py:12")
    p = profile(
        ("forward", (TRAIN, (layer, f"aten::addmm @cpu_time_ns={10 * MS}"))),
        ("backward", (TRAIN, (layer, f"aten::mm [backward] @cpu_time_ns={20 * MS}"))),
    )
    assert "backward_imbalance" not in rules(analyze(p))


def test_backward_imbalance_quiet_when_the_operator_is_a_tiny_share():
    helper = line("decay_weights", "model.py:31")
    p = profile(
        ("forward", (TRAIN, (helper, f"aten::cumprod @cpu_time_ns={MS // 10}"),
                     (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={100 * MS}"))),
        ("backward", (TRAIN, (helper, f"aten::cumprod [backward] @cpu_time_ns={MS}"))),
    )
    assert "backward_imbalance" not in rules(analyze(p))


def test_backward_imbalance_judges_gemms_by_their_flops():
    # a busy host stretched this linear's backward to 3.3x; its FLOPs are 2x, so it is normal
    layer = line("forward", "model.py:12")

    def linear(backward_flops):
        return profile(
            ("forward", (TRAIN, (layer, f"operator:torch.nn.functional.linear @cpu_time_ns={70 * MS},flops=400"))),
            ("backward", (TRAIN, (layer, "operator:torch.nn.functional.linear [backward]"
                                         f" @cpu_time_ns={230 * MS},flops={backward_flops}"))),
        )

    assert "backward_imbalance" not in rules(analyze(linear(800)))
    # the same times with equal FLOPs are an imbalance
    assert only(analyze(linear(400)), "backward_imbalance")["evidence"]["expected_ratio"] == 1.0


def test_backward_imbalance_on_a_jax_profile_speaks_jax():
    # XLA op time (device time) of a JAX window; dot_general's backward FLOPs are 2x
    layer = line("forward", "model.py:12")
    p = profile(
        ("forward", (TRAIN, (layer, f"operator:dot_general @device_time_ns={10 * MS},flops=100"))),
        ("backward", (TRAIN, (layer, f"operator:dot_general [backward] @device_time_ns={90 * MS},flops=200"))),
        framework="jax", env={"jax": "0.10.2", "backend": "cpu"},
    )
    f = only(analyze(p), "backward_imbalance")
    assert f["evidence"]["metric"] == "device_time_ns" and f["evidence"]["expected_ratio"] == 2.0
    assert "jax.custom_vjp" in f["suggestion"] and "autograd" not in f["suggestion"]
    assert "gpu_idle" not in rules(analyze(p))  # the CPU device is not a GPU
