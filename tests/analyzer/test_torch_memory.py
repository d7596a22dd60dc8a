"""End to end with dc_torch and memory=True: each planted memory problem is
found at its module or line with the bytes its shapes say, its fix takes off
the peak what the finding said, and the fixed loop raises nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("dc_torch.loop")

from dc_core.analyzer import analyze_ranks
from dc_core.analyzer.base import saved_bytes
from tests.analyzer import memory_planted as planted
from tests.analyzer.helpers import only, rules

MIB = 2**20
MEMORY_RULES = {"activation_memory", "optimizer_state_memory", "allocator_fragmentation"}


def _one(profiles):
    assert len(profiles) == 1, profiles
    p = profiles[0]
    if not p.memory:
        pytest.skip(f"memory was not collected: {p.memory_note or p.memory_missing}")
    return p


def test_checkpointing_the_planted_blocks_saves_what_the_finding_says(tmp_path):
    plain = _one(planted.run_blocks(tmp_path / "plain"))
    f = only(plain.findings, "activation_memory")
    assert plain.tree.node_frame(f["node"]).detail == "Net"
    assert f["evidence"]["modules"] == [f"blocks.{i} (Block)" for i in range(4)]
    assert f["evidence"]["inside_bytes"] == 4 * planted.BLOCK_INSIDE
    assert saved_bytes(f) == planted.BLOCKS_GAIN  # 96 MiB
    assert "checkpointing each saves ≈ 96.0 MiB at the peak" in f["message"]
    # the recompute is the blocks' forward per step, reported as the profile has it
    blocks = [
        n
        for n in range(len(plain.tree))
        if plain.tree.node_frame(n).detail == "Block" and not plain.tree.node_frame(n).backward
    ]
    forward = [n for n in blocks if plain.tree.path_frames(n)[0].name == "forward"]
    cpu = plain.tree.inclusive("cpu_time_ns")
    # per step, as the rule divides it (its sum of means may round 1 ns apart)
    recompute = sum(cpu[n] for n in forward) / 3
    assert f["evidence"]["recompute_ns"] > 0
    assert abs(f["evidence"]["recompute_ns"] - recompute) <= 1

    fixed = _one(planted.run_blocks(tmp_path / "fixed", checkpointed=True))
    assert not set(rules(fixed.findings)) & MEMORY_RULES
    # the peak falls by the estimate, less the gradients made while blocks are recomputed
    fell = plain.memory[0].peak_bytes - fixed.memory[0].peak_bytes
    assert 0.8 * saved_bytes(f) <= fell <= saved_bytes(f), fell / MIB


def test_adamw_state_is_twice_the_parameters_and_momentum_is_not(tmp_path):
    adamw = _one(planted.run_optimizer(tmp_path / "adamw"))
    f = only(adamw.findings, "optimizer_state_memory")
    params = sum(p * q + p for p, q in ((4096, 2048), (2048, 4096))) * 4
    e = f["evidence"]
    assert e["parameter_bytes"] == params and e["ratio"] >= 2.0
    assert params * 2 <= e["state_bytes"] <= params * 2 + 4096  # + AdamW's step counters
    assert saved_bytes(f) == e["state_bytes"] * 3 // 4
    assert f["path"] == ["optimizer"]

    sgd = _one(planted.run_optimizer(tmp_path / "sgd", optimizer="sgd"))
    assert not set(rules(sgd.findings)) & MEMORY_RULES


def test_a_history_of_losses_keeping_their_graphs_is_found_at_its_line(tmp_path):
    windows = planted.run_history(tmp_path / "leak", leak=True)
    assert len(windows) == 4 and windows[0].memory
    f = only(analyze_ranks(windows), "memory_growth")
    frame = windows[-1].tree.node_frame(f["node"])
    assert frame.file.endswith("memory_planted.py") and frame.line == planted.HISTORY_LINE
    e = f["evidence"]
    assert e["windows"] == [[s, s + 2] for s in (2, 6, 10, 14)]
    assert e["kept_bytes"] == [2 * planted.HISTORY_KEPT] * 4
    assert e["kept_per_step_bytes"] == planted.HISTORY_KEPT
    assert saved_bytes(f) == 14 * planted.HISTORY_KEPT  # steps 2 to 15

    clean = planted.run_history(tmp_path / "clean", leak=False)
    assert "memory_growth" not in rules(analyze_ranks(clean))
