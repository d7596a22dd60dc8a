"""The HF callback on a tiny GPT-2 built from a config (no downloads), CPU only."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from dc_core.analyzer import findings_of
from dc_core.record.config import ProfilerConfig
from dc_core.store.logdir import load_profiles
from dc_hf import DeepContextCallback, is_available
from tests.conftest import module_calls


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 32, length: int = 16) -> None:
        self.ids = torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(tmp_path, callback, dataset=None, **args):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64)
    )
    settings = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to=[],
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=100,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**{**settings, **args}),
        train_dataset=Tokens() if dataset is None else dataset,
        eval_dataset=Tokens(8),
        callbacks=[callback],
    )
    trainer.train()
    return trainer


def test_gpt2_attention_forward_and_backward_under_its_module(tmp_path):
    assert is_available()
    callback = DeepContextCallback(
        steps={"start": 2, "count": 3}, cpu_sampling_hz=0, system_interval_ms=0
    )
    train(tmp_path, callback)
    # default logdir: output_dir/runs (transformers 5 has no args.logging_dir)
    assert [p.relative_to(tmp_path).as_posix() for p in callback.written] == [
        f"out/runs/plugins/deepcontext/{callback.written[0].parent.name}/steps-2-4.pb"
    ]
    (profile,), errors = load_profiles(tmp_path)
    assert errors == [] and profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    tree = profile.tree
    assert {tree.node_frame(n).name for n in tree.children(0)} >= {
        "forward",
        "backward",
        "optimizer",
    }
    attn = tree.find_all(lambda f: f.kind == "module" and f.name == "transformer.h.0.attn")
    assert {tree.node_frame(n).detail for n in attn} == {"GPT2Attention"}
    phases = {tree.path_frames(n)[0].name for n in attn}
    assert phases == {"forward", "backward"}
    below = [
        tree.node_frame(d)
        for n in attn
        for d in tree.preorder(n)
        if tree.node_frame(d).kind == "operator"
    ]
    assert any(not f.backward for f in below) and any(f.backward for f in below)
    forward_ops = [n for n in attn if tree.path_frames(n)[0].name == "forward"]
    assert module_calls(tree, forward_ops[0]) == 3  # once per profiled step (2 layers are h.0, h.1)
    # transformers' own frames are skipped: the module path starts at the test's call
    path = [f for f in tree.path_frames(forward_ops[0]) if f.kind == "python"]
    assert path and not any("/transformers/" in f.file for f in path)


@pytest.mark.parametrize(
    "args, kwargs, collected",
    [
        ((), {"memory": True}, True),
        ((ProfilerConfig(memory=True),), {}, True),
        ((), {}, False),  # MEMORY_DEFAULT
    ],
    ids=["keyword", "config", "default"],
)
def test_memory_true_reaches_the_sessions_config(tmp_path, args, kwargs, collected):
    seen = []

    class Spy(DeepContextCallback):
        def on_step_begin(self, *a, **kw):
            super().on_step_begin(*a, **kw)
            seen.append(self.session.config.collect_memory)

    # no window opens: only the config is looked at
    callback = Spy(
        *args,
        **kwargs,
        logdir=str(tmp_path / "prof"),
        steps={"start": 100, "count": 1},
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    train(tmp_path, callback, max_steps=2)
    assert seen == [collected, collected]


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    callback = DeepContextCallback(
        steps={"start": 1, "count": 2}, cpu_sampling_hz=0, system_interval_ms=0
    )
    train(
        tmp_path,
        callback,
        max_steps=4,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=2,
    )
    (profile,), _ = load_profiles(tmp_path)
    assert profile.steps == (1, 3) and len(profile.step_times_ns) == 2
    attn = profile.tree.find_all(lambda f: f.name == "transformer.h.0.attn")
    forward = [n for n in attn if profile.tree.path_frames(n)[0].name == "forward"]
    assert module_calls(profile.tree, forward[0]) == 4  # 2 steps × 2 micro-batches


def _forward_count(profile, module="transformer.h.0.attn", phase="forward"):
    tree = profile.tree
    (node,) = [
        n for n in tree.find_all(lambda f: f.name == module) if tree.path_frames(n)[0].name == phase
    ]
    return module_calls(tree, node)


def test_user_logdir_wins_and_eval_is_its_own_window(tmp_path):
    callback = DeepContextCallback(
        logdir=str(tmp_path / "prof"),
        steps={"start": 1, "count": 2},
        profile_eval=True,
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    # evaluation after step 1, inside the training window: 8 examples, 2 batches
    train(
        tmp_path,
        callback,
        max_steps=3,
        eval_strategy="steps",
        eval_steps=2,
        per_device_eval_batch_size=4,
    )
    runs = sorted(p.relative_to(tmp_path / "prof").parts[0] for p in callback.written)
    assert runs == ["eval", "plugins"]
    profiles, _ = load_profiles(tmp_path / "prof")
    (evaluation,) = [p for p in profiles if p.run == "eval"]
    (training,) = [p for p in profiles if p.run != "eval"]
    assert evaluation.steps == (0, 2) and training.steps == (1, 3)
    assert "backward" not in {
        evaluation.tree.node_frame(n).name for n in evaluation.tree.children(0)
    }
    # both batches, the first included (it begins when the trainer decides to evaluate) ...
    assert _forward_count(evaluation, phase="eval") == 2
    # ... and none of them in the training window they ran inside
    assert _forward_count(training) == 2


def test_profiles_land_in_the_tensorboard_run_beside_the_scalars(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    callback = DeepContextCallback(
        steps={"start": 1, "count": 2}, cpu_sampling_hz=0, system_interval_ms=0
    )
    train(tmp_path, callback, report_to=["tensorboard"], logging_steps=1)
    (written,) = callback.written
    run_dir = written.parents[3]  # <run>/plugins/deepcontext/<rank>-<host>/steps-1-2.pb
    assert run_dir.parent == tmp_path / "out" / "runs"
    assert list(run_dir.glob("events.out.tfevents.*")), "the scalars' event file is in the same run"
    # said once, where it went and how to open it
    said = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("DeepContext wrote")
    ]
    assert said == [
        f"DeepContext wrote {written}: read it with `deepcontext report {run_dir}`, "
        f"or open the tab with `deepcontext view {run_dir}`"
    ]


def test_regression_gradient_clipping_sat_under_forward(tmp_path):
    """The Trainer's clipping (``_foreach_norm``, ``_foreach_mul_``: 2.4 ms a
    step) sat under ``forward``: it is part of the update, under its own frame."""
    callback = DeepContextCallback(
        steps={"start": 2, "count": 2}, cpu_sampling_hz=0, system_interval_ms=0
    )
    train(tmp_path, callback, max_grad_norm=1.0)
    (profile,), _ = load_profiles(tmp_path)
    tree = profile.tree
    norms = tree.find_all(lambda f: f.kind == "operator" and "_foreach_norm" in f.name)
    assert norms and {tree.path_frames(n)[0].name for n in norms} == {"optimizer"}
    assert all(any(f.name == "clip_grad_norm_" for f in tree.path_frames(n)) for n in norms)


class SlowTokens(Tokens):
    """`Tokens` whose every sample costs ``cpu_s`` of CPU to make."""

    def __init__(self, cpu_s: float) -> None:
        super().__init__(512)
        self.cpu_s = cpu_s

    def __getitem__(self, i: int) -> dict:
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        return super().__getitem__(i)


@pytest.mark.slow
def test_a_loader_worker_too_slow_for_the_trainers_step_is_a_warning_that_says_so(tmp_path):
    """The Trainer fetches a step's batch before the step begins, so the
    window's last step loads none: the finding weighs the loads it has. One
    worker making a batch of 8 samples in 320 ms of CPU, behind a step of
    tens of ms, keeps every step waiting on any host."""
    callback = DeepContextCallback(steps={"start": 2, "count": 5}, system_interval_ms=0)
    train(
        tmp_path,
        callback,
        SlowTokens(0.040),
        max_steps=8,
        per_device_train_batch_size=8,
        dataloader_num_workers=1,
    )
    (profile,), errors = load_profiles(tmp_path)
    assert errors == []
    (loading,) = [
        n for n in profile.tree.children(0) if profile.tree.node_frame(n).name == "dataloader"
    ]
    assert profile.tree.value(loading, "count") == len(profile.step_times_ns) - 1 == 4
    (found,) = [f for f in findings_of(profile) if f["rule"] == "dataloader_bottleneck"]
    # the loads it has: each waits for most of a batch's 320 ms
    assert found["evidence"]["per_step_ns"] >= 100_000_000, found
    workers = found["evidence"]["workers"]
    assert workers["workers"] == 1 and workers["cpu_ns"] >= 160_000_000, workers
    if "worker processes waited" in found["message"]:
        # a host so loaded that the step's own time, stretched, rivals the
        # worker's CPU (beside three busy loops): the host's, and it says so
        assert profile.loader_wait_ns > 0 and found["severity"] == "info", found
    else:
        assert found["severity"] in ("warning", "critical"), found
        assert "its 1 worker process runs " in found["message"], found
        assert workers["idle_host_wait_ns"] > 0, workers
