"""Memory by context on the native capture path, against sizes known exactly.

The planted model is ``Linear(1024, 4096) → GELU → Linear(4096, 1024)`` on a
batch of 64 in fp32, trained with AdamW. A planted spike right after the loss
puts the window's peak where every tensor autograd saves is still live, so
what each module holds for the backward follows from the shapes: each op's
output is saved by the op after it (GELU saves its input, the second Linear
its input, the loss's ``y * y`` its operand).
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import dc_torch
from dc_core.record.config import StepRange
from dc_core.store.logdir import load_profiles
from dc_torch.native import load
from tests.torch.conftest import only_profile, requires_cuda

QUIET = {"cpu_sampling_hz": 0, "system_interval_ms": 0}
BATCH, D, H = 64, 1024, 4096
F32 = 4
SPIKE = 256 << 20  # far above what the backward and the optimizer add after it


@pytest.fixture(autouse=True)
def both_capture_paths():
    """Memory is read on the native capture path (the Python path's test says so itself)."""
    if load()[0] is None:
        reason = "native capture unavailable: " + load()[1]
        if os.environ.get("CI") == "true":
            pytest.fail(reason)  # CI builds it: failing to is a failure
        pytest.skip(reason)


class Block(torch.nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.act = torch.nn.GELU()
        self.out = torch.nn.Linear(H, D)
        self.checkpointed = checkpointed

    def _run(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(h))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.checkpointed:
            return checkpoint(self._run, h, use_reentrant=False)
        return self._run(h)


class Planted(torch.nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(D, H)
        self.block = Block(checkpointed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.inp(x))


def train(logdir, checkpointed=False, steps=3, spike=True):
    torch.manual_seed(0)
    model = Planted(checkpointed)
    opt = torch.optim.AdamW(model.parameters())
    with dc_torch.profile(
        logdir=str(logdir), steps=StepRange(start=1, count=steps - 1), memory=True, **QUIET
    ) as prof:
        for _ in range(steps):
            x = torch.randn(BATCH, D)
            y = model(x)
            loss = (y * y).mean()
            if spike:
                planted = torch.empty(SPIKE, dtype=torch.uint8)  # the window's peak
                del planted
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return model, only_profile(logdir)


def module_bytes(tree, name, metric):
    """``metric`` inclusive over every node of module ``name`` (the forward one, its
    backward mirror and where its resident blocks are billed)."""
    inclusive = tree.inclusive(metric) if metric in tree.metrics else [0] * len(tree)
    nodes = [
        n
        for n in range(1, len(tree))
        if tree.node_frame(n).kind == "module" and tree.node_frame(n).name == name
    ]
    return sum(inclusive[n] for n in nodes)


def near(value, expected, rel=0.01):
    return abs(value - expected) <= rel * expected


def test_saved_for_backward_per_module_is_what_autograd_saves(tmp_path):
    _, profile = train(tmp_path)
    tree = profile.tree
    (memory,) = profile.memory
    assert memory.device == "cpu" and memory.peak_phase == "forward" and memory.peak_step in (1, 2)
    saved = "peak_live_bytes.saved_for_backward"
    # each module's output, saved by the op after it
    assert near(module_bytes(tree, "inp", saved), BATCH * H * F32)
    assert near(module_bytes(tree, "block.act", saved), BATCH * H * F32)
    assert near(module_bytes(tree, "block.out", saved), BATCH * D * F32)
    # the spike is a temporary of its own line, and the peak's node
    spike_node = memory.peak_node
    assert tree.node_frame(spike_node).name == "aten::empty"
    assert tree.value(spike_node, "peak_live_bytes.temporary") == SPIKE


def test_parameters_and_adamw_state_are_numel_times_four(tmp_path):
    model, profile = train(tmp_path)
    tree = profile.tree
    numel = {name: p.numel() for name, p in model.named_parameters()}
    assert near(module_bytes(tree, "inp", "peak_live_bytes.parameter"), (D * H + H) * F32)
    assert near(module_bytes(tree, "block.out", "peak_live_bytes.parameter"), (H * D + D) * F32)
    total = sum(numel.values()) * F32
    assert near(tree.total("peak_live_bytes.parameter"), total)
    # exp_avg and exp_avg_sq per parameter (and a 4-byte step each)
    assert near(tree.total("peak_live_bytes.optimizer_state"), 2 * total)
    assert near(module_bytes(tree, "inp", "peak_live_bytes.optimizer_state"), 2 * (D * H + H) * F32)


def test_the_peak_is_the_allocators_own(tmp_path):
    """The peak less the blocks held from before the window is the highest total
    the allocator reported for the window's own allocations."""
    _, profile = train(tmp_path)
    (memory,) = profile.memory
    own = memory.peak_bytes - memory.held_at_peak_bytes
    assert memory.allocator_peak_bytes > SPIKE
    assert near(own, memory.allocator_peak_bytes)
    # the tree holds the peak: its categories add up to it
    assert profile.tree.total("peak_live_bytes") == memory.peak_bytes
    assert memory.peak_bytes == max(memory.timeline_bytes)


def test_checkpointing_drops_what_the_checkpointed_module_saves(tmp_path):
    _, plain = train(tmp_path / "plain")
    _, ckpt = train(tmp_path / "ckpt", checkpointed=True)
    saved = "peak_live_bytes.saved_for_backward"
    # GELU's output is no longer kept for the backward...
    assert near(module_bytes(plain.tree, "block.act", saved), BATCH * H * F32)
    assert module_bytes(ckpt.tree, "block.act", saved) == 0
    # what the block keeps is its input, which the checkpoint saves (in GELU's stead),
    # and its output, which the loss saves
    assert near(module_bytes(ckpt.tree, "inp", saved), BATCH * H * F32)
    assert near(module_bytes(ckpt.tree, "block", saved), BATCH * D * F32)
    assert near(module_bytes(plain.tree, "block", saved), BATCH * (H + D) * F32)

    # the recompute runs in the backward: GELU's output is made again there
    def backward_alloc(profile):
        tree = profile.tree
        backward = tree.find("backward")
        return tree.inclusive("alloc_bytes")[backward]

    steps = len(ckpt.step_times_ns)
    assert backward_alloc(ckpt) - backward_alloc(plain) >= steps * BATCH * H * F32


def test_a_window_of_many_steps_keeps_a_bounded_timeline(tmp_path):
    _, profile = train(tmp_path, steps=40, spike=False)
    (memory,) = profile.memory
    assert 2 <= len(memory.timeline_bytes) <= 256
    assert memory.timeline_t_ns == sorted(memory.timeline_t_ns)


def test_memory_off_by_default_leaves_no_memory_metrics(tmp_path):
    torch.manual_seed(0)
    model = Planted()
    with dc_torch.profile(logdir=str(tmp_path), steps=StepRange(start=0, count=1), **QUIET) as prof:
        model(torch.randn(BATCH, D)).sum().backward()
        prof.step()
    profile = only_profile(tmp_path)
    assert profile.memory == [] and profile.memory_missing == []
    assert not any(m.startswith(("peak_live_bytes", "free_bytes")) for m in profile.tree.metrics)


def test_the_python_path_names_the_metrics_it_lacks(tmp_path, caplog):
    from dc_core.record import memory

    memory._warn_missing.cache_clear()
    model = Planted()
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=0, count=2, every=2, repeat=2),
        memory=True,
        capture="python",
        **QUIET,
    ) as prof:
        for _ in range(4):
            model(torch.randn(BATCH, D)).sum().backward()
            prof.step()
    warned = [r for r in caplog.records if "memory was asked for" in r.getMessage()]
    assert len(warned) == 1  # once, for both windows
    assert "peak_live_bytes.saved_for_backward" in warned[0].getMessage()
    profiles, errors = load_profiles(tmp_path)
    assert not errors and len(profiles) == 2
    profile = profiles[0]
    assert profile.memory == []
    assert "peak_live_bytes.saved_for_backward" in profile.memory_missing
    assert "native capture path" in profile.memory_note
    assert profile.tree.total("count") > 0  # the window is written with the rest


def test_a_users_torch_profiler_takes_over_the_allocators_reporting(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    model = Planted()
    with dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=0, count=2), memory=True, **QUIET
    ) as prof:
        model(torch.randn(BATCH, D)).sum().backward()
        prof.step()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as peer:
            model(torch.randn(BATCH, D)).sum().backward()
        prof.step()
    # the user's profiler ran and saw the allocations
    assert any(e.cpu_memory_usage > 0 for e in peer.key_averages())
    written = only_profile(tmp_path)
    (memory,) = written.memory  # what was tracked before it started
    assert memory.peak_bytes > 0
    assert "torch.profiler started inside the window" in written.memory_note
    # and after the window, torch.profiler starts as ever
    with profile(activities=[ProfilerActivity.CPU]):
        torch.ones(2) + 1


def test_a_dataloaders_batch_is_input(tmp_path):
    """The batch a DataLoader collates in the window is the step's ``input``, billed
    where it was made (the dataloader phase)."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4 * BATCH, D))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    model = Planted()
    with dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=1, count=2), memory=True, **QUIET
    ) as prof:
        for (x,) in loader:
            loss = model(x).sum()
            planted = torch.empty(SPIKE, dtype=torch.uint8)  # the peak, with the batch live
            del planted
            loss.backward()
            prof.step()
    tree = only_profile(tmp_path).tree
    inputs = tree.inclusive("peak_live_bytes.input")
    assert near(inputs[0], BATCH * D * F32)
    assert near(inputs[tree.find("dataloader")], BATCH * D * F32)


def test_an_error_in_the_memory_hooks_turns_the_profiler_off_and_training_goes_on(
    tmp_path, monkeypatch, caplog
):
    from dc_torch import memory

    def broken(self, *args):
        raise RuntimeError("planted")

    monkeypatch.setattr(memory.MemoryHooks, "_classify", broken)
    torch.manual_seed(0)
    model = Planted()
    opt = torch.optim.AdamW(model.parameters())
    losses = []
    with dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=0, count=3), memory=True, **QUIET
    ) as prof:
        for _ in range(4):
            loss = model(torch.randn(BATCH, D)).pow(2).mean()
            loss.backward()
            opt.step()  # the planted error is raised in its pre-hook
            opt.zero_grad()
            losses.append(loss.item())
            prof.step()
    assert len(losses) == 4
    assert sum("planted" in r.getMessage() for r in caplog.records) == 1
    # every hook is out: no saved-tensor hooks of ours, the reporting slot is free
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        torch.ones(4) * 2
    # what was collected before the error is written
    assert only_profile(tmp_path).tree.total("count") > 0


@requires_cuda
def test_on_cuda_the_peak_is_the_caching_allocators_own(tmp_path):
    """On a CUDA device the caching allocator reports to the same slot: the window's
    peak (held blocks included) is ``torch.cuda.max_memory_allocated()`` over it,
    and the saved tensors are as on the CPU."""
    torch.manual_seed(0)
    model = Planted().cuda()
    opt = torch.optim.AdamW(model.parameters())
    with dc_torch.profile(
        logdir=str(tmp_path), steps=StepRange(start=1, count=2), memory=True, **QUIET
    ) as prof:
        for step in range(3):
            y = model(torch.randn(BATCH, D, device="cuda"))
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            del y, loss
            prof.step()
            if step == 0:  # the window is open from here
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
    truth = torch.cuda.max_memory_allocated()
    profile = only_profile(tmp_path)
    cuda = profile.memory[0]
    assert cuda.device == "cuda:0"
    assert near(cuda.peak_bytes, truth)
    assert "device activity is not traced in memory windows" in profile.memory_note
    assert near(module_bytes(profile.tree, "inp", "peak_live_bytes.parameter"), (D * H + H) * F32)
