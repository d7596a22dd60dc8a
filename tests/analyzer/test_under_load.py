"""Workloads nobody here wrote, each profiled with a busy process on every
core: the analyzer warns about none of them (a warning noise can produce is a
defect), and the planted problems are still found under the same load."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("lightning")

from torch import nn
from torch.nn import functional as F

import dc_torch
from dc_core.analyzer import analyze_ranks, findings_of
from dc_core.analyzer.base import saved_bytes
from dc_core.store.logdir import load_profiles, read_profile
from dc_hf import DeepContextCallback as HFCallback
from dc_lightning import DeepContextCallback as LightningCallback
from tests.analyzer import fixes, memory_planted
from tests.hf.test_callback import train as train_gpt2
from tests.lightning.workload import DemoTransformerModule, loader, trainer

pytestmark = pytest.mark.slow

WINDOW = {"start": 2, "count": 6}
MEMORY_RULES = {"activation_memory", "optimizer_state_memory", "allocator_fragmentation"}


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """A process spinning on each core while the block runs."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture(autouse=True)
def loaded():
    with busy_cores():
        yield


def _loud(profile) -> list[dict]:
    return [f for f in findings_of(profile) if f["severity"] in ("warning", "critical")]


def _only_profile(logdir):
    profiles, errors = load_profiles(logdir)
    assert errors == [] and len(profiles) == 1, (profiles, errors)
    return profiles[0]


def test_lightnings_demo_transformer_gets_no_warning(tmp_path):
    callback = LightningCallback(steps=WINDOW)
    trainer(
        max_steps=WINDOW["start"] + WINDOW["count"] + 1,
        default_root_dir=str(tmp_path),
        callbacks=[callback],
    ).fit(DemoTransformerModule(), loader(batches=12))
    profile = _only_profile(tmp_path)
    assert profile.tree.find_all(
        lambda f: f.kind == "module" and "TransformerEncoderLayer" in f.detail
    )
    assert _loud(profile) == []


def test_a_tiny_gpt2_under_hf_trainer_gets_no_warning(tmp_path):
    train_gpt2(tmp_path, HFCallback(logdir=str(tmp_path / "dc"), steps=WINDOW), max_steps=9)
    profile = _only_profile(tmp_path / "dc")
    assert profile.tree.find_all(lambda f: f.kind == "module" and f.detail == "GPT2Attention")
    assert _loud(profile) == []


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


@pytest.mark.parametrize("memory", [False, True], ids=["plain", "memory"])
def test_a_cnn_gets_no_warning(tmp_path, memory):
    torch.manual_seed(0)
    model = CNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    with dc_torch.profile(logdir=str(tmp_path), steps=WINDOW, memory=memory) as prof:
        for _ in range(WINDOW["start"] + WINDOW["count"] + 1):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    (path,) = prof.written
    profile = read_profile(path)
    assert profile.tree.find_all(lambda f: f.kind == "operator" and "max_pool2d" in f.name)
    assert _loud(profile) == []
    if memory and profile.memory:  # tracked, and nothing worth a memory finding
        assert "peak_live_bytes.saved_for_backward" in profile.tree.metrics
        assert not {f["rule"] for f in findings_of(profile)} & MEMORY_RULES


@pytest.mark.parametrize("name", ["dtype", "loop", "norm", "optimizer"])
def test_planted_problems_are_still_found_under_load(tmp_path, name):
    run, rule, where = fixes.PROBLEMS[name]
    found = [f for f in run(tmp_path, False).findings if f["rule"] == rule]
    assert len(found) == 1 and found[0]["severity"] == "warning"
    assert any(where in label for label in found[0]["path"])


def test_planted_memory_problems_are_found_with_their_bytes_under_load(tmp_path):
    """Bytes are not stretched by load: the same numbers as on a quiet host; the
    recompute time a checkpoint costs is reported, never a threshold."""
    (blocks,) = memory_planted.run_blocks(tmp_path / "blocks")
    if not blocks.memory:
        pytest.skip(f"memory was not collected: {blocks.memory_note}")
    (f,) = [f for f in blocks.findings if f["rule"] == "activation_memory"]
    assert saved_bytes(f) == memory_planted.BLOCKS_GAIN and f["evidence"]["recompute_ns"] > 0
    windows = memory_planted.run_history(tmp_path / "history", leak=True)
    (g,) = [g for g in analyze_ranks(windows) if g["rule"] == "memory_growth"]
    assert g["evidence"]["kept_per_step_bytes"] == memory_planted.HISTORY_KEPT
    assert g["path"][-1].startswith(f"memory_planted.py:{memory_planted.HISTORY_LINE} ")
