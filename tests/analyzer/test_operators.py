"""dtype_conversion, layout_conversion, small_ops, unfused_norm, host_sync on literal trees."""

from pytest import approx

from dc_core.analyzer import analyze
from tests.analyzer.helpers import MS, US, line, only, profile, rules

TRAIN = line("train", "train.py:20")
# what the PyTorch adapter records
CUDA_RUN = {
    "torch": "2.5.0",
    "cuda": "12.4",
    "devices": "NVIDIA H100",
}
CPU_RUN = {"torch": "2.5.0"}
HEAVY = (line("head", "model.py:90"), f"aten::addmm @cpu_time_ns={80 * MS},count=3")


def test_dtype_conversion_names_the_ping_pong_helper():
    helper_a, helper_b = line("ping_pong", "model.py:60"), line("ping_pong", "model.py:61")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    helper_a,
                    (
                        f"aten::to @cpu_time_ns={2 * MS},count=30",
                        f"aten::_to_copy @cpu_time_ns={4 * MS},count=30",
                    ),
                ),
                (
                    helper_b,
                    (
                        f"aten::to @cpu_time_ns={2 * MS},count=30",
                        f"aten::_to_copy @cpu_time_ns={4 * MS},count=30",
                    ),
                ),
                HEAVY,
            ),
        )
    )
    f = only(analyze(p), "dtype_conversion")
    # both lines of the helper add up: 12 ms of 92 ms
    assert (
        f["evidence"]["time_ns"] == approx(4 * MS, abs=3)
        and f["evidence"]["calls"] == 60
        and f["evidence"]["per_step"] == 20
    )
    assert f["gain_ns"] == 4 * MS  # all of the casts, per step
    assert f["path"][:3] == ["forward", "train.py:20 train", "model.py:60 ping_pong"]
    assert f["path"][-1] == "aten::to" and f["severity"] == "warning"
    assert "autocast" in f["suggestion"]


def test_dtype_conversion_quiet_for_a_single_cheap_cast():
    p = profile(
        (
            "forward",
            (TRAIN, (line("prep", "train.py:9"), f"aten::to @cpu_time_ns={MS},count=3"), HEAVY),
        )
    )
    assert "dtype_conversion" not in rules(analyze(p))


def test_layout_conversion_finds_contiguous_after_transpose():
    attn = line("attention", "model.py:44")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    attn,
                    f"aten::transpose @cpu_time_ns={US},count=3",
                    (
                        f"aten::contiguous @cpu_time_ns={MS},count=3",
                        f"aten::clone @cpu_time_ns={9 * MS},count=3",
                    ),
                ),
                (
                    line("attention", "model.py:45"),
                    (
                        f"aten::reshape @cpu_time_ns={MS},count=3",
                        f"aten::clone @cpu_time_ns={5 * MS},count=3",
                    ),
                ),
                HEAVY,
            ),
        )
    )
    f = only(analyze(p), "layout_conversion")
    assert f["path"] == [
        "forward",
        "train.py:20 train",
        "model.py:44 attention",
        "aten::contiguous",
    ]
    assert (
        f["evidence"]["time_ns"] == approx(16 * MS / 3, abs=3) and f["evidence"]["transposes"] == 3
    )
    assert f["evidence"]["operators"] == ["aten::contiguous", "aten::reshape"]
    assert "channels_last" not in f["suggestion"]  # no convolution in this model


def test_layout_conversion_suggests_channels_last_next_to_convolutions():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    line("stem", "model.py:5"),
                    f"aten::conv2d @cpu_time_ns={50 * MS}",
                    (f"aten::contiguous @cpu_time_ns={10 * MS}", "aten::clone"),
                ),
            ),
        )
    )
    assert "channels_last" in only(analyze(p), "layout_conversion")["suggestion"]


def test_layout_conversion_quiet_for_view_only_reshapes():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (line("f", "model.py:3"), f"aten::reshape @cpu_time_ns={10 * MS}", "aten::view"),
                HEAVY,
            ),
        )
    )
    assert "layout_conversion" not in rules(analyze(p))


def test_small_ops_flags_a_loop_of_tiny_operators():
    loop = line("per_token_update", "model.py:70")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    loop,
                    f"aten::add @cpu_time_ns={3 * MS},count=600",
                    f"aten::mul @cpu_time_ns={3 * MS},count=600",
                    f"aten::select @cpu_time_ns={MS},count=600",
                ),
                HEAVY,
            ),
        )
    )
    f = only(analyze(p), "small_ops")
    assert f["path"][-1] == "model.py:70 per_token_update"
    assert f["evidence"]["per_step"] == 600.0 and f["evidence"]["median_us"] == 5.0
    assert "torch.compile" in f["suggestion"] and "foreach" in f["suggestion"]


def test_small_ops_quiet_for_few_large_operators():
    p = profile(
        (
            "forward",
            (TRAIN, (line("f", "m.py:1"), f"aten::add @cpu_time_ns={30 * MS},count=300"), HEAVY),
        )
    )
    # 100 per step but 100 µs each
    assert "small_ops" not in rules(analyze(p))


def test_small_ops_weighs_the_device_work_of_an_operator_with_kernels_not_its_launch():
    # 600 launches per step of 5 µs each (a tenth of the step), but every kernel runs 2 ms: no small operators
    big = (
        line("f", "m.py:1"),
        (f"aten::mm @cpu_time_ns={9 * MS},count=1800", f"kernel:gemm @device_time_ns={3600 * MS}"),
    )
    assert "small_ops" not in rules(
        analyze(profile(("forward", (TRAIN, big, HEAVY)), env=CUDA_RUN))
    )
    tiny = (
        line("f", "m.py:1"),
        (
            f"aten::add @cpu_time_ns={9 * MS},count=1800",
            f"kernel:add_kernel @device_time_ns={3 * MS}",
        ),
    )
    assert (
        only(analyze(profile(("forward", (TRAIN, tiny, HEAVY)), env=CUDA_RUN)), "small_ops")[
            "evidence"
        ]["median_us"]
        == 1.67
    )


def test_small_ops_in_jax_are_operations_dispatched_one_by_one_whatever_their_work():
    loop = line("rowsum", "model.py:31")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    loop,
                    (
                        f"operator:add @cpu_time_ns={90 * MS},count=900",
                        f"kernel:wrapped_add @device_time_ns={90 * MS}",
                    ),
                ),
                (
                    line("step", "model.py:40"),
                    ("operator:dot_general @count=3", f"kernel:dot @device_time_ns={300 * MS}"),
                ),
            ),
        ),
        framework="jax",
    )
    f = only(analyze(p), "small_ops")
    # host time per dispatch
    assert f["evidence"]["per_step"] == 300 and f["evidence"]["median_us"] == 100.0
    assert f["path"][-1] == "model.py:31 rowsum" and "lax.scan" in f["suggestion"]
    # jitted, the loop is one program: its ops have no host time of their own
    jitted = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    loop,
                    ("operator:add @count=900", f"kernel:wrapped_add @device_time_ns={90 * MS}"),
                ),
            ),
        ),
        framework="jax",
    )
    assert "small_ops" not in rules(analyze(jitted))


def test_dtype_conversion_finds_jax_s_convert_element_type():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    line("loss", "model.py:18"),
                    (
                        "operator:convert_element_type @count=3",
                        f"kernel:wrapped_convert @device_time_ns={60 * MS}",
                    ),
                ),
                (
                    line("loss", "model.py:19"),
                    ("operator:dot_general @count=3", f"kernel:dot @device_time_ns={30 * MS}"),
                ),
            ),
        ),
        framework="jax",
    )
    f = only(analyze(p), "dtype_conversion")
    assert (
        f["gain_ns"] == 20 * MS
        and f["path"][-1] == "convert_element_type"
        and "before the training loop" in f["suggestion"]
    )


def test_unfused_norm_finds_a_hand_written_rmsnorm():
    norm = [line("rmsnorm", f"model.py:{n}") for n in (14, 15, 16)]
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (norm[0], f"aten::pow @cpu_time_ns={2 * MS}"),
                (norm[1], f"aten::mean @cpu_time_ns={MS}"),
                (
                    norm[2],
                    f"aten::add @cpu_time_ns={MS}",
                    f"aten::rsqrt @cpu_time_ns={MS}",
                    f"aten::mul @cpu_time_ns={2 * MS}",
                ),
                HEAVY,
            ),
        )
    )
    f = only(analyze(p), "unfused_norm")
    assert f["evidence"]["kind"] == "RMSNorm" and f["evidence"]["ops"] == 5
    assert f["evidence"]["time_ns"] == approx(7 * MS / 3, abs=5)
    # per step: the chain's 7 ms, less a fused norm's 4 passes at the chain's 7/5 ms per operator
    assert f["gain_ns"] == approx((7 * MS - 4 * 7 * MS / 5) / 3, abs=5)
    assert f["path"][-1].endswith("rmsnorm") and f["path"][1] == "train.py:20 train"
    assert "RMSNorm" in f["suggestion"]


def test_unfused_norm_quiet_for_the_fused_layer_norm():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    line("block", "model.py:3"),
                    (f"aten::layer_norm @cpu_time_ns={5 * MS}", "aten::native_layer_norm"),
                    f"aten::mul @cpu_time_ns={MS}",
                ),
                HEAVY,
            ),
        )
    )
    assert "unfused_norm" not in rules(analyze(p))


def test_unfused_norm_quiet_when_the_ops_are_in_different_functions():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (line("a", "m.py:1"), f"aten::pow @cpu_time_ns={5 * MS}"),
                (line("b", "m.py:9"), f"aten::mean @cpu_time_ns={5 * MS}"),
                (line("c", "m.py:20"), f"aten::rsqrt @cpu_time_ns={5 * MS}"),
                HEAVY,
            ),
        )
    )
    assert "unfused_norm" not in rules(analyze(p))


def test_regression_unfused_norm_blamed_the_users_step_line_for_an_engine_s_update():
    """DeepSpeed's step computes its gradient norm (pow, sum, sqrt, div) under the
    user's ``engine.step()`` line, its files being machinery: not a norm layer."""
    step = line("train", "train.py:30")
    p = profile(
        ("forward", (TRAIN, HEAVY)),
        (
            "optimizer",
            (
                step,
                f"aten::pow @cpu_time_ns={5 * MS}",
                f"aten::sum @cpu_time_ns={5 * MS}",
                f"aten::sqrt @cpu_time_ns={5 * MS}",
                f"aten::div @cpu_time_ns={5 * MS}",
            ),
        ),
    )
    assert "unfused_norm" not in rules(analyze(p))


def test_host_sync_reports_the_line_and_rate():
    p = profile(
        (
            "other",
            (
                TRAIN,
                (
                    line("train", "train.py:27"),
                    (f"aten::item @cpu_time_ns={30 * 1000},count=3", "aten::_local_scalar_dense"),
                ),
                HEAVY,
            ),
        ),
        env=CUDA_RUN,
    )
    f = only(analyze(p), "host_sync")
    assert f["path"] == ["other", "train.py:20 train", "train.py:27 train", "aten::item"]
    assert f["evidence"]["per_step"] == 1.0 and f["evidence"]["calls"] == 3
    # once per step, no device time recorded: worth knowing, not a warning
    assert f["severity"] == "info"


def test_regression_host_sync_on_a_cpu_only_run():
    """``Tensor.__bool__ synchronises host and device`` on a run with no device:
    nothing to wait for, so no finding, however frequent."""
    tree = (
        "forward",
        (
            TRAIN,
            (line("f", "m.py:5"), f"operator:torch.Tensor.__bool__ @cpu_time_ns={MS},count=60"),
            (line("g", "m.py:9"), "aten::item @cpu_time_ns=1000,count=3"),
            HEAVY,
        ),
    )
    assert "host_sync" not in rules(analyze(profile(tree, env=CPU_RUN)))
    assert "host_sync" not in rules(analyze(profile(tree, env={"jax": "0.4.30", "backend": "cpu"})))
    # the same calls where the environment names a device: both lines found, the frequent one a warning
    found = {
        f["path"][-2]: f for f in analyze(profile(tree, env=CUDA_RUN)) if f["rule"] == "host_sync"
    }
    assert {k: (f["evidence"]["per_step"], f["severity"]) for k, f in found.items()} == {
        "m.py:5 f": (20.0, "warning"),
        "m.py:9 g": (1.0, "info"),
    }
    assert "host_sync" in rules(analyze(profile(tree, env={"jax": "0.4.30", "backend": "gpu"})))


def test_host_sync_is_a_warning_when_frequent_or_on_gpu():
    frequent = profile(
        (
            "forward",
            (TRAIN, (line("f", "m.py:5"), f"aten::nonzero @cpu_time_ns={MS},count=60"), HEAVY),
        ),
        env=CUDA_RUN,
    )
    assert only(analyze(frequent), "host_sync")["severity"] == "warning"
    gpu = profile(
        (
            "forward",
            (
                TRAIN,
                (line("f", "m.py:5"), ("aten::item @cpu_time_ns=1000,count=3")),
                ("aten::mm", "kernel:sgemm @device_time_ns=5000000"),
            ),
        )
    )
    assert only(analyze(gpu), "host_sync")["severity"] == "warning"


def test_host_sync_quiet_without_syncing_calls():
    p = profile(("forward", (TRAIN, HEAVY, (line("f", "m.py:1"), "aten::add @cpu_time_ns=1000"))))
    assert "host_sync" not in rules(analyze(p))


def test_unfused_norm_with_torch_function_names():
    # what the PyTorch adapter records: torch-level names, Python operators as dunders
    norm = line("forward", "model.py:22")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    "module:norm",
                    (
                        norm,
                        f"operator:torch.Tensor.pow @cpu_time_ns={MS}",
                        f"operator:torch.Tensor.mean @cpu_time_ns={MS}",
                        f"operator:torch.Tensor.__add__ @cpu_time_ns={MS}",
                        f"operator:torch.rsqrt @cpu_time_ns={MS}",
                        f"operator:torch.Tensor.__mul__ @cpu_time_ns={2 * MS}",
                    ),
                ),
                HEAVY,
            ),
        )
    )
    f = only(analyze(p), "unfused_norm")
    assert f["evidence"]["kind"] == "RMSNorm" and f["path"] == [
        "forward",
        "train.py:20 train",
        "norm",
        "model.py:22 forward",
    ]
    assert {"pow", "mean", "rsqrt", "mul"} <= set(f["evidence"]["operators"])


def test_regression_host_sync_blamed_the_loop_for_the_optimizers_own_item_calls():
    """A for-loop AdamW reads its step counter with .item() for every parameter:
    framework code under the user's ``optimizer.step()`` line, not a user sync."""
    from dc_core.analyzer import analyze
    from dc_core.model.tree import tree_from_lists
    from dc_core.store.profile import Profile

    tree = tree_from_lists(
        (
            "forward",
            (
                "python:train_step|train.py:10",
                "operator:torch.nn.functional.linear @cpu_time_ns=9000000,count=3",
            ),
        ),
        (
            "optimizer",
            (
                "python:train_step|train.py:12",
                "operator:torch.Tensor.item @cpu_time_ns=500000,count=162",
            ),
        ),
    )
    profile = Profile(tree=tree, steps=(0, 3), step_times_ns=[3_200_000] * 3, env=CUDA_RUN)
    assert [f for f in analyze(profile) if f["rule"] == "host_sync"] == []
