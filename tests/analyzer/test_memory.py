"""Memory rules on built windows: activation_memory, optimizer_state_memory,
allocator_fragmentation (which bytes, at which node, what the fix saves),
each quiet on a window without the problem; byte gains ranked and stored."""

from __future__ import annotations

from dc_core.analyzer import analyze, sort_findings
from dc_core.analyzer.base import saved_bytes
from dc_core.store.profile import DeviceMemory, decode, encode
from tests.analyzer.helpers import MS, line, only, profile, rules, with_classes

MIB = 2**20
GIB = 2**30
MEMORY_RULES = ("activation_memory", "optimizer_state_memory", "allocator_fragmentation")


def _op(name: str, alloc: int, saved: int, cpu_ms: int = 30, device_ms: int = 0) -> str:
    metrics = [f"alloc_bytes={alloc}", f"cpu_time_ns={cpu_ms * MS}"]
    if saved:
        metrics.append(f"peak_live_bytes.saved_for_backward={saved}")
    if device_ms:
        metrics.append(f"device_time_ns={device_ms * MS}")
    return f"{name} @{','.join(metrics)}"


def _block(i: int, last: bool = False, device_ms: int = 0) -> tuple:
    """A residual MLP block at batch 2048, width 256, hidden 2048: its up
    projection and GELU outputs (16 MiB each) are saved for backward, and its
    output (2 MiB) by the next block, unless it is the last."""
    return (
        f"module:blocks.{i}",
        (
            line("Block.forward", "net.py:11"),
            (f"module:blocks.{i}.up", _op("aten::linear", 48 * MIB, 16 * MIB, device_ms=device_ms)),
            (f"module:blocks.{i}.act", _op("aten::gelu", 48 * MIB, 16 * MIB, device_ms=device_ms)),
            (f"module:blocks.{i}.down", _op("aten::linear", 6 * MIB, 0, device_ms=device_ms)),
            _op("aten::add", 6 * MIB, 0 if last else 2 * MIB),
        ),
    )


def _blocks(peak: int = 204 * MIB, device_ms: int = 0, phase: str = "backward"):
    spec = (
        "forward",
        (line("<module>", "train.py:27"), _op("aten::randn", 6 * MIB, 2 * MIB)),
        (
            line("<module>", "train.py:28"),
            (
                "module:net",
                (
                    line("Net.forward", "net.py:21"),
                    *(_block(i, last=i == 3, device_ms=device_ms) for i in range(4)),
                ),
            ),
        ),
    )
    p = profile(spec, memory=[DeviceMemory("cuda:0", peak_bytes=peak, peak_phase=phase)])
    return with_classes(p, {"net": "Net", **{f"blocks.{i}": "Block" for i in range(4)}})


def test_checkpointing_each_block_saves_their_activations_but_one_block():
    p = _blocks(device_ms=3)
    f = only(analyze(p), "activation_memory")
    assert f["severity"] == "info" and f["gain_ns"] is None
    assert p.tree.node_frame(f["node"]).name == "net" and f["path"][-1] == "net (Net)"
    e = f["evidence"]
    assert e["checkpoint"] == "each"
    assert e["modules"] == [f"blocks.{i} (Block)" for i in range(4)]
    assert e["saved_bytes"] == 134 * MIB  # 3 x (16 + 16 + 2) + (16 + 16)
    assert e["inside_bytes"] == 128 * MIB  # less each block's output
    # one block's 32 MiB is live again while its backward recomputes it
    assert e["gain_bytes"] == saved_bytes(f) == 96 * MIB
    # the blocks' forward per step (3 steps): 12 operators x 10 ms host, 1 ms device
    assert e["recompute_ns"] == 4 * 3 * (10 + 1) * MS + 4 * 10 * MS
    assert "checkpointing each saves ≈ 96.0 MiB at the peak" in f["message"]
    assert "blocks.0 … blocks.3, the 4 Block modules under net (Net)" in f["message"]
    assert f"≈ {e['recompute_ns'] / 1e6:.1f} ms per step of forward run again" in f["message"]
    assert "use_reentrant=False" in f["suggestion"]
    assert "less each one's last operator's" in f["gain_basis"]


def test_one_module_holding_the_activations_is_checkpointed_alone():
    # an encoder of 2 MiB-output layers saving 96 MiB inside, then a head that saves 64 MiB
    spec = (
        "forward",
        (
            line("<module>", "train.py:30"),
            ("module:encoder", _op("aten::conv2d", 96 * MIB, 96 * MIB), _op("aten::relu", 2, 2)),
            ("module:head", _op("aten::linear", 64 * MIB, 64 * MIB)),
        ),
    )
    p = profile(spec, memory=[DeviceMemory("cpu", peak_bytes=256 * MIB)])
    f = only(analyze(p), "activation_memory")
    assert f["evidence"]["checkpoint"] == "module"
    assert f["path"][-1] == "encoder" and f["evidence"]["saved_bytes"] == 96 * MIB + 2
    # its output (the relu's) stays; what else it saved comes back while its backward
    # recomputes it, by when the head's 64 MiB are freed: the peak falls by those
    assert f["evidence"]["inside_bytes"] == 96 * MIB and f["evidence"]["gain_bytes"] == 64 * MIB
    assert "checkpointing it saves ≈ 64.0 MiB at the peak" in f["message"]
    assert "checkpoint(encoder, *inputs, use_reentrant=False)" in f["suggestion"]


def test_no_activation_finding_where_checkpointing_cannot_lower_the_peak():
    # Linear -> GELU -> Linear: each layer's saved bytes are its output, which the
    # next one keeps; checkpointing all of them recomputes everything at once.
    spec = (
        "forward",
        (line("<module>", "train.py:11"), _op("aten::randn", 16 * MIB, 16 * MIB)),
        (
            line("<module>", "train.py:12"),
            (
                "module:mlp",
                ("module:0", _op("aten::linear", 64 * MIB, 64 * MIB)),
                ("module:1", _op("aten::gelu", 64 * MIB, 64 * MIB)),
                ("module:2", _op("aten::linear", 16 * MIB, 16 * MIB)),
            ),
        ),
    )
    p = profile(spec, memory=[DeviceMemory("cpu", peak_bytes=260 * MIB)])
    assert "activation_memory" not in rules(analyze(p))


def test_no_activation_finding_below_the_share_or_the_floor_or_without_memory():
    assert "activation_memory" not in rules(analyze(_blocks(peak=600 * MIB)))  # 22 % of the peak
    assert "activation_memory" not in rules(
        analyze(_blocks(), {"activation_memory.min_mb": 100})  # saves 96 MiB
    )
    p = _blocks()
    p.memory = []
    assert "activation_memory" not in rules(analyze(p))


def _optimizer(state: int, params: int, world_size: int = 1, temporary: int = 16 * MIB):
    spec = (
        ("forward", (line("<module>", "train.py:12"), "aten::linear @cpu_time_ns=1000000")),
        ("forward", f"module:0 @peak_live_bytes.parameter={params}"),
        (
            "optimizer",
            (
                line("<module>", "train.py:15"),
                (
                    line("AdamW.step", "adam.py:214"),
                    f"aten::div @peak_live_bytes.temporary={temporary},cpu_time_ns=1000000",
                ),
            ),
            f"module:0 @peak_live_bytes.optimizer_state={state}",
        ),
    )
    memory = [DeviceMemory("cuda:0", peak_bytes=160 * MIB, peak_phase="optimizer")]
    return profile(*spec, memory=memory, world_size=world_size)


def test_adamw_state_twice_the_parameters_suggests_an_8bit_state():
    p = _optimizer(state=64 * MIB, params=32 * MIB)
    f = only(analyze(p), "optimizer_state_memory")
    assert f["severity"] == "info" and f["path"] == ["optimizer"]
    e = f["evidence"]
    assert (e["state_bytes"], e["parameter_bytes"], e["ratio"]) == (64 * MIB, 32 * MIB, 2.0)
    assert e["gain_bytes"] == 48 * MIB and e["modules"] == [
        {"module": "0", "state_bytes": 64 * MIB}
    ]
    assert "an 8-bit state saves ≈ 48.0 MiB at the peak" in f["message"]
    assert "AdamW8bit" in f["suggestion"] and "ZeroRedundancyOptimizer" in f["suggestion"]
    assert "fused=True also leaves out the 16.0 MiB of temporaries" in f["suggestion"]
    assert "3/4 of it" in f["gain_basis"]


def test_sharding_the_state_is_sized_for_the_ranks():
    f = only(analyze(_optimizer(64 * MIB, 32 * MIB, world_size=8)), "optimizer_state_memory")
    assert f["evidence"]["sharded_gain_bytes"] == 56 * MIB
    assert "each of the 8 ranks keeps 1/8 of it, saving ≈ 56.0 MiB" in f["suggestion"]


def test_no_optimizer_finding_for_a_small_or_momentum_state():
    assert "optimizer_state_memory" not in rules(analyze(_optimizer(32 * MIB, 32 * MIB)))  # SGD
    assert "optimizer_state_memory" not in rules(analyze(_optimizer(32 * MIB, 16 * MIB)))  # 32 MiB
    assert "optimizer_state_memory" not in rules(analyze(_optimizer(64 * MIB, 0)))


def _cuda(peak: int, allocator_peak: int, reserved: int, device: str = "cuda:0"):
    memory = [
        DeviceMemory(
            device,
            peak_bytes=peak,
            allocator_peak_bytes=allocator_peak,
            max_reserved_bytes=reserved,
        )
    ]
    return profile(("forward", "aten::mm @cpu_time_ns=1000000"), memory=memory)


def test_reserved_far_above_allocated_is_fragmentation():
    f = only(analyze(_cuda(3 * GIB, 7 * GIB // 2, 8 * GIB)), "allocator_fragmentation")
    assert f["severity"] == "warning" and f["node"] == -1
    e = f["evidence"]
    # against the allocator's own highest total, which counts blocks older than the window
    assert e["allocated_peak_bytes"] == 7 * GIB // 2 and e["max_reserved_bytes"] == 8 * GIB
    assert e["gain_bytes"] == 9 * GIB // 2 and e["ratio"] == round(8 / 3.5, 3)
    assert "4.5 GiB reserved and unused" in f["message"]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f["suggestion"]


def test_no_fragmentation_finding_for_modest_slack_or_off_cuda():
    assert "allocator_fragmentation" not in rules(analyze(_cuda(4 * GIB, 4 * GIB, 11 * GIB // 2)))
    assert "allocator_fragmentation" not in rules(analyze(_cuda(GIB // 2, GIB // 2, 7 * GIB // 5)))
    assert "allocator_fragmentation" not in rules(analyze(_cuda(GIB, GIB, 8 * GIB, device="cpu")))
    assert "allocator_fragmentation" not in rules(analyze(_cuda(0, 0, 8 * GIB)))


def test_a_window_without_memory_gets_no_memory_finding():
    spec = ("forward", (line("<module>", "train.py:12"), "aten::linear @cpu_time_ns=9000000"))
    assert not set(rules(analyze(profile(spec)))) & set(MEMORY_RULES)


def test_byte_savings_rank_after_time_savings_and_by_their_size():
    def f(rule, gain_ns=None, gain_bytes=None):
        evidence = {} if gain_bytes is None else {"gain_bytes": gain_bytes}
        return {"rule": rule, "severity": "info", "gain_ns": gain_ns, "evidence": evidence}

    ranked = sort_findings(
        [
            f("hotspot"),
            f("optimizer_state_memory", gain_bytes=48 * MIB),
            f("activation_memory", gain_bytes=96 * MIB),
            f("small_ops", gain_ns=1000),
        ]
    )
    assert rules(ranked) == [
        "small_ops",
        "activation_memory",
        "optimizer_state_memory",
        "hotspot",
    ]


def test_the_byte_saving_is_stored_with_the_finding():
    p = _blocks()
    p.findings = analyze(p)
    (f,) = [f for f in decode(encode(p)).findings if f["rule"] == "activation_memory"]
    assert f["gain_ns"] is None and saved_bytes(f) == 96 * MIB


def test_jax_windows_get_jax_fixes_sized_for_them():
    p = _optimizer(64 * MIB, 32 * MIB)
    p.framework = "jax"
    f = only(analyze(p), "optimizer_state_memory")
    assert saved_bytes(f) == 16 * MIB and "mu_dtype=jnp.bfloat16" in f["suggestion"]
    assert "a bfloat16 first moment saves ≈ 16.0 MiB at the peak" in f["message"]
    blocks = _blocks()
    blocks.framework = "jax"
    g = only(analyze(blocks), "activation_memory")
    assert "jax.checkpoint" in g["suggestion"] and "rematerialising each saves" in g["message"]
