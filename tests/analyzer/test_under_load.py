"""Workloads nobody here wrote, each profiled with a busy process on every
core: the analyzer warns about none of them (a warning noise can produce is a
defect), and the planted problems are still found under the same load."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

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
from tests.analyzer.planted import _on_one_thread
from tests.hf.test_callback import train as train_gpt2
from tests.lightning.workload import DemoTransformerModule, loader, trainer

pytestmark = pytest.mark.slow

WINDOW = {"start": 2, "count": 6}
MS = 1_000_000
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


def _spin_cpu(seconds: float) -> None:
    """Compute for ``seconds`` of this thread's CPU time: a starved thread takes longer."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


class ComputedSamples(torch.utils.data.Dataset):
    """Samples that each cost ``cpu_s`` of CPU to make (a decode, an augmentation)."""

    def __init__(self, cpu_s: float) -> None:
        self.cpu_s = cpu_s

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int):
        _spin_cpu(self.cpu_s)
        return torch.full((64,), float(index % 7)), torch.zeros(())


def _pin_to(core: int) -> Callable[[int], None]:
    return lambda _worker: os.sched_setaffinity(0, {core})


@_on_one_thread
def _train_with_a_worker(logdir, batch_cpu_s: float, step_cpu_s: float, worker_core=None):
    """One loader worker making batches of ``batch_cpu_s`` of CPU each, and a
    step of ``step_cpu_s``; the worker pinned to ``worker_core`` if given."""
    model = nn.Linear(64, 1)
    loader = torch.utils.data.DataLoader(
        ComputedSamples(batch_cpu_s / 8),
        batch_size=8,
        num_workers=1,
        worker_init_fn=None if worker_core is None else _pin_to(worker_core),
    )
    batches = iter(loader)
    with dc_torch.profile(logdir=str(logdir), steps=WINDOW) as prof:
        for _ in range(WINDOW["start"] + WINDOW["count"] + 1):
            x, y = next(batches)
            F.mse_loss(model(x).squeeze(-1), y).backward()
            _spin_cpu(step_cpu_s)
            prof.step()
    del batches
    (path,) = prof.written
    return read_profile(path)


def _loading(profile) -> list[dict]:
    return [f for f in findings_of(profile) if f["rule"] == "dataloader_bottleneck"]


def test_a_loader_worker_the_host_starves_is_a_note_and_a_slow_one_a_warning(tmp_path):
    """A worker that makes each batch in 10 ms of CPU, behind a step of 15 ms,
    would keep it fed; pinned to one core beside 6 more spinners, it gets a
    seventh of that core or less, and the step waits for its batches. That
    wait is the host's: the worker waited for a CPU at least as long (a
    batch's wall time less its 10 ms of CPU, against that wall time less the
    step's 15 ms, per step on average), so the finding is a note that says so. A worker that needs
    40 ms of CPU a batch behind a 5 ms step is slow on any host (with a core
    to itself it would keep the step waiting about 35 ms): a warning, even
    where the host starves the worker too."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores: one to starve the worker on, one for the step")
    starved_core, step_core = cores[0], cores[1]
    spin = f"import os; os.sched_setaffinity(0, {{{starved_core}}})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(6)]
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {step_core})
        starved = _train_with_a_worker(tmp_path / "starved", 0.010, 0.015, starved_core)
    finally:
        os.sched_setaffinity(0, before)
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    (note,) = _loading(starved)
    steps = len(starved.step_times_ns)
    assert note["severity"] == "info", note
    assert "the data loader's worker processes waited" in note["message"], note
    assert starved.loader_wait_ns / steps >= note["evidence"]["spread"]["mean_ns"] > 0
    # its 10 ms of CPU a batch, behind a step longer than that: no wait alone
    workers = note["evidence"]["workers"]
    assert workers["workers"] == 1 and 8 * MS <= workers["cpu_ns"] <= 30 * MS, workers
    assert workers["idle_host_wait_ns"] == 0 and workers["own_ns"] > workers["cpu_ns"], workers

    slow = _train_with_a_worker(tmp_path / "slow", 0.040, 0.005)
    (warning,) = _loading(slow)
    assert warning["severity"] in ("warning", "critical"), warning
    # with a core of its own it would still keep the step waiting: the
    # finding says what it and the step cost
    workers = warning["evidence"]["workers"]
    assert 32 * MS <= workers["cpu_ns"] <= 80 * MS, workers
    assert workers["idle_host_wait_ns"] == workers["cpu_ns"] - workers["own_ns"] > 0, workers
    assert "its 1 worker process runs " in warning["message"], warning
