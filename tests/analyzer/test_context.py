"""hotspot and backward_imbalance on literal trees."""

from pytest import approx

from dc_core.analyzer import analyze
from tests.analyzer.helpers import MS, line, only, profile, rules

TRAIN = line("train", "train.py:20")


def test_hotspot_is_one_summary_of_where_the_step_goes():
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (line("attention", "model.py:40"), f"aten::bmm @cpu_time_ns={60 * MS},count=30"),
                (line("mlp", "model.py:55"), f"aten::addmm @cpu_time_ns={30 * MS},count=30"),
                (line("tiny", "model.py:70"), f"aten::add @cpu_time_ns={1 * MS},count=30"),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (
                    line("attention", "model.py:40"),
                    f"aten::bmm [backward] @cpu_time_ns={9 * MS},count=60",
                ),
            ),
        ),
    )
    f = only(analyze(p), "hotspot")
    lines, ops = f["evidence"]["lines"], f["evidence"]["operators"]
    # tiny is < 5 %
    assert [x["label"] for x in lines] == [
        "model.py:40 attention",
        "model.py:55 mlp",
    ]
    assert f["path"] == ["forward", "train.py:20 train", "model.py:40 attention"]
    assert (
        lines[0]["forward_ns"] == 60 * MS
        and lines[0]["backward_ns"] == 9 * MS
        and lines[0]["time_ns"] == 69 * MS
    )
    # of the window's 3 steps
    assert lines[0]["share"] == 0.69 and lines[0]["per_step_ns"] == 23 * MS
    assert ops[0]["operator"] == "aten::bmm" and ops[0]["calls"] == 30
    assert f["message"].startswith(
        "where the step goes: model.py:40 attention 69.0%, model.py:55 mlp 30.0%; "
        "operator aten::bmm 60.0%"
    )
    assert f["severity"] == "info" and f["gain_ns"] is None and "not a fix" in f["gain_basis"]


def test_the_profilers_own_operator_is_no_finding():
    # A cold window's call-path resolving is a node of the profiler's own under
    # the phase (seen at 5% of an HF Trainer step): no hotspot names it, nor
    # any other rule, however large.
    p = profile(
        (
            "forward",
            f"deepcontext::call_paths @cpu_time_ns={30 * MS},count=200",
            (TRAIN, (line("mlp", "model.py:55"), f"aten::addmm @cpu_time_ns={40 * MS},count=30")),
        ),
    )
    found = analyze(p)
    f = only(found, "hotspot")
    assert [o["operator"] for o in f["evidence"]["operators"]] == ["aten::addmm"]
    assert [x["label"] for x in f["evidence"]["lines"]] == ["model.py:55 mlp"]
    assert not any("deepcontext::" in x["message"] for x in found)


def test_hotspot_line_shown_where_its_operators_run_with_their_phases():
    # An optimizer whose own frames are skipped bills its ops to the loop's line;
    # that line also sits above the whole backward pass, which must not decide
    # where the finding points nor count as the line's own backward time.
    layer = line("forward", "model.py:12")
    p = profile(
        ("forward", (TRAIN, (layer, f"aten::addmm @cpu_time_ns={40 * MS}"))),
        (
            "backward",
            (
                TRAIN,
                f"aten::sum [backward] @cpu_time_ns={MS}",
                (layer, f"aten::mm [backward] @cpu_time_ns={40 * MS}"),
            ),
        ),
        (
            "optimizer",
            (TRAIN, f"aten::mul_ @cpu_time_ns={12 * MS}", f"aten::add_ @cpu_time_ns={8 * MS}"),
        ),
    )
    lines = only(analyze(p), "hotspot")["evidence"]["lines"]
    (train,) = [x for x in lines if x["label"] == "train.py:20 train"]
    assert p.tree.path_frames(train["node"])[0].name == "optimizer"
    assert (
        train["optimizer_ns"] == 20 * MS and train["forward_ns"] == 0 and train["backward_ns"] == MS
    )
    assert train["operators"] == ["aten::mul_", "aten::add_", "aten::sum"]


def test_hotspot_quiet_when_nothing_reaches_the_share():
    specs = [(line(f"f{i}", f"m.py:{i}"), f"aten::op{i} @cpu_time_ns={MS}") for i in range(40)]
    p = profile(("forward", (TRAIN, *specs)))
    assert "hotspot" not in rules(analyze(p))


def test_backward_imbalance_points_at_cumprod_in_its_helper():
    helper = line("decay_weights", "model.py:31")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (helper, f"aten::cumprod @cpu_time_ns={2 * MS},count=3"),
                (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={20 * MS},count=3"),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (
                    helper,
                    (
                        f"aten::cumprod [backward] @cpu_time_ns={4 * MS},count=3",
                        f"aten::mul @cpu_time_ns={14 * MS}",
                    ),
                ),
                (
                    line("head", "model.py:50"),
                    f"aten::addmm [backward] @cpu_time_ns={30 * MS},count=3",
                ),
            ),
        ),
    )
    f = only(analyze(p), "backward_imbalance")
    assert f["severity"] == "warning"
    assert f["path"] == [
        "backward",
        "train.py:20 train",
        "model.py:31 decay_weights",
        "aten::cumprod [backward]",
    ]
    # per step, of 3 steps
    assert f["evidence"]["forward_ns"] == approx(2 * MS / 3, abs=3) and f["evidence"][
        "backward_ns"
    ] == approx(6 * MS, abs=3)
    assert f["evidence"]["backward_node"] == "aten::cumprod [backward]"
    assert f["gain_ns"] == approx(6 * MS - 2 * MS / 3, abs=5)  # all above the normal 1x
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
        (
            "forward",
            (
                TRAIN,
                (helper, f"aten::cumprod @cpu_time_ns={MS // 10}"),
                (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={100 * MS}"),
            ),
        ),
        ("backward", (TRAIN, (helper, f"aten::cumprod [backward] @cpu_time_ns={MS}"))),
    )
    assert "backward_imbalance" not in rules(analyze(p))


def test_backward_imbalance_judges_gemms_by_their_flops_and_the_bytes_they_write():
    # a busy host stretched this linear's backward to 3.3x; its FLOPs are 2x, so it is normal
    layer = line("forward", "model.py:12")

    def linear(backward_flops, backward_bytes=400, forward_ms=70):
        metrics = (
            ""
            if backward_flops is None
            else f",flops={backward_flops},alloc_bytes={backward_bytes}"
        )
        return profile(
            (
                "forward",
                (
                    TRAIN,
                    (
                        layer,
                        f"operator:torch.nn.functional.linear @cpu_time_ns={forward_ms * MS}"
                        + ("" if backward_flops is None else ",flops=400,alloc_bytes=400"),
                    ),
                ),
            ),
            (
                "backward",
                (
                    TRAIN,
                    (
                        layer,
                        "operator:torch.nn.functional.linear [backward]"
                        f" @cpu_time_ns={230 * MS}{metrics}",
                    ),
                ),
            ),
        )

    assert "backward_imbalance" not in rules(analyze(linear(800)))
    # the same times with equal FLOPs and bytes are an imbalance, and not a formula's
    f = only(analyze(linear(400)), "backward_imbalance")
    assert f["evidence"]["expected_ratio"] == 1.0
    assert "two GEMMs" in f["suggestion"] and "backward formula" not in f["suggestion"]
    # a backward writing 512x the forward's bytes (a weight gradient, 4 rows a
    # step: the ddp_exposed.py model) is the write's cost, however few its FLOPs
    assert "backward_imbalance" not in rules(analyze(linear(800, 512 * 400, forward_ms=5)))
    # 7.8x with neither measured (a lightweight window): no multiple to judge by
    assert "backward_imbalance" not in rules(analyze(linear(None, forward_ms=30)))


def test_backward_imbalance_on_a_jax_profile_speaks_jax():
    # XLA op time (device time) of a JAX window; a sort's backward is a scatter, 2x is normal
    layer = line("forward", "model.py:12")
    p = profile(
        ("forward", (TRAIN, (layer, f"operator:sort @device_time_ns={10 * MS}"))),
        ("backward", (TRAIN, (layer, f"operator:sort [backward] @device_time_ns={90 * MS}"))),
        framework="jax",
        env={"jax": "0.10.2", "backend": "cpu"},
    )
    f = only(analyze(p), "backward_imbalance")
    assert f["evidence"]["metric"] == "device_time_ns" and f["evidence"]["expected_ratio"] == 2.0
    assert "jax.custom_vjp" in f["suggestion"] and "autograd" not in f["suggestion"]
    assert "gpu_idle" not in rules(analyze(p))  # the CPU device is not a GPU


def test_backward_imbalance_weighs_the_quietest_step_not_one_preempted_step():
    # make demo on a loaded host: one step's backward of a div line took 750 ms
    # (aten::sum, aten::add_ preempted); in its quietest step it is normal
    div = line("forward", "model.py:30")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (div, f"aten::div @cpu_time_ns={3 * MS},count=3"),
                (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={30 * MS},count=3"),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (div, f"aten::sum [backward] @cpu_time_ns={757 * MS},count=3"),
                (
                    line("head", "model.py:50"),
                    f"aten::addmm [backward] @cpu_time_ns={60 * MS},count=3",
                ),
            ),
        ),
    )
    # as sums judged it
    assert "backward_imbalance" in rules(analyze(p, {"backward_imbalance.ratio": 3}))
    bounds = p.step_bounds
    sums = {n for n in range(len(p.tree)) if p.tree.node_frame(n).name == "aten::sum"}
    for n in sums:
        # 1 ms in its quietest step
        bounds["cpu_time_ns.min"][n], bounds["cpu_time_ns.max"][n] = (
            MS,
            755 * MS,
        )
    assert "backward_imbalance" not in rules(analyze(p))


def test_backward_imbalance_leaves_communication_out():
    # FSDP on two gloo ranks: the all-gather's copy-in and the reduce-scatter
    # are communication; DDP's reducer's own work; JAX's sharded step: the gradient psum
    layer = line("forward", "model.py:12")
    fsdp = profile(
        ("forward", (TRAIN, (layer, f"operator:fsdp::all_gather_copy_in @cpu_time_ns={MS}"))),
        (
            "backward",
            (
                TRAIN,
                (
                    layer,
                    f"operator:fsdp::all_gather_copy_in [backward] @cpu_time_ns={23 * MS}",
                    f"operator:c10d::reduce_scatter_tensor_coalesced_ [backward] @cpu_time_ns={40 * MS}",
                ),
            ),
        ),
    )
    assert "backward_imbalance" not in rules(analyze(fsdp))
    # DDP's reducer: its copies into the buckets and its division by the world size
    ddp = profile(
        ("forward", (TRAIN, (layer, f"operator:aten::layer_norm @cpu_time_ns={10 * MS}"))),
        (
            "backward",
            (
                TRAIN,
                (
                    layer,
                    f"operator:aten::layer_norm [backward] @cpu_time_ns={20 * MS}",
                    f"operator:torch::distributed::reducer::copy_ @cpu_time_ns={40 * MS}",
                    f"operator:torch::distributed::reducer::mul_out @cpu_time_ns={40 * MS}",
                ),
            ),
        ),
    )
    assert "backward_imbalance" not in rules(analyze(ddp))
    jax = profile(
        ("forward", (TRAIN, (layer, f"operator:sort @device_time_ns={10 * MS}"))),
        (
            "backward",
            (
                TRAIN,
                (
                    layer,
                    f"operator:sort [backward] @device_time_ns={20 * MS}",
                    f"operator:psum_invariant.35 [backward] @device_time_ns={60 * MS}",
                ),
            ),
        ),
        framework="jax",
        env={"jax": "0.10.2", "backend": "cpu"},
    )
    assert "backward_imbalance" not in rules(analyze(jax))


def test_backward_imbalance_knows_pooling_and_losses_are_dearer_backward():
    # a CNN's max_pool2d and cross_entropy: 3.6x and 3.3x are their nature
    pool, loss = line("forward", "cnn.py:20"), line("loss", "train.py:30")
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (pool, f"aten::max_pool2d @cpu_time_ns={10 * MS}"),
                (loss, f"aten::cross_entropy_loss @cpu_time_ns={10 * MS}"),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (pool, f"aten::max_pool2d [backward] @cpu_time_ns={36 * MS}"),
                (loss, f"aten::cross_entropy_loss [backward] @cpu_time_ns={33 * MS}"),
            ),
        ),
    )
    assert "backward_imbalance" not in rules(analyze(p))


def test_backward_imbalance_is_a_note_where_workers_waited_as_long():
    # Lightning's demo Transformer under load: a LayerNorm's backward waited
    # 20 ms per step for an intra-op worker that had no CPU
    norm = line("forward", "model.py:40")
    tree = (
        (
            "forward",
            (
                TRAIN,
                (norm, f"aten::layer_norm @cpu_time_ns={MS // 10}"),
                (line("head", "model.py:50"), f"aten::addmm @cpu_time_ns={200 * MS}"),
            ),
        ),
        ("backward", (TRAIN, (norm, f"aten::layer_norm [backward] @cpu_time_ns={60 * MS}"))),
    )
    assert (
        only(analyze(profile(*tree, others_wait_ns=0)), "backward_imbalance")["severity"]
        == "warning"
    )
    f = only(analyze(profile(*tree, others_wait_ns=66 * MS)), "backward_imbalance")
    assert (
        f["severity"] == "info"
        and "other threads waited 22.0 ms per step for a CPU" in f["message"]
    )


def test_backward_imbalance_needs_three_steps_to_warn():
    helper = line("decay_weights", "model.py:31")
    spec = (
        ("forward", (TRAIN, (helper, f"aten::cumprod @cpu_time_ns={2 * MS}"))),
        ("backward", (TRAIN, (helper, f"aten::cumprod [backward] @cpu_time_ns={40 * MS}"))),
    )
    one = only(analyze(profile(*spec, steps=(5, 6))), "backward_imbalance")
    assert (
        one["severity"] == "info"
        and "1 step cannot tell a cost from machine noise" in one["message"]
    )
    assert (
        only(analyze(profile(*spec, steps=(5, 8))), "backward_imbalance")["severity"] == "warning"
    )


def test_no_backward_imbalance_on_a_sharding_runtimes_own_operators():
    """Regression: FSDP's copy-in under a block ran 23x longer in backward
    (where the block's gather is waited on) than in forward, and was reported as
    the block's backward formula. Under a ``sharding`` frame the operators are
    FSDP's, not the model's, and no operator rule reads them."""
    block = "module:blocks.0"
    copy_in = "fsdp::all_gather_copy_in"
    p = profile(
        (
            "forward",
            (
                TRAIN,
                (
                    block,
                    ("sharding:FSDP::pre_forward", f"{copy_in} @cpu_time_ns={MS},count=3"),
                    f"aten::addmm @cpu_time_ns={10 * MS},count=3",
                ),
            ),
        ),
        (
            "backward",
            (
                TRAIN,
                (
                    block,
                    (
                        "sharding:FSDP::pre_backward [backward]",
                        f"{copy_in} [backward] @cpu_time_ns={23 * MS},count=3",
                        f"aten::copy_ [backward] @cpu_time_ns={30 * MS},count=3",
                    ),
                    f"aten::addmm [backward] @cpu_time_ns={20 * MS},count=3",
                ),
            ),
        ),
    )
    assert "backward_imbalance" not in rules(analyze(p))
    # the same operators outside a sharding frame are the line's own
    p = profile(
        ("forward", (TRAIN, (block, f"aten::copy_ @cpu_time_ns={MS},count=3"))),
        ("backward", (TRAIN, (block, f"aten::copy_ [backward] @cpu_time_ns={30 * MS},count=3"))),
    )
    assert "backward_imbalance" in rules(analyze(p))
