"""The Lightning callback on a tiny GPT: windows, phases, modules, logdir, accumulation, eval."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("lightning")

from dc_core.record.config import ProfilerConfig
from dc_core.store.logdir import load_profiles
from dc_lightning import DeepContextCallback, is_available
from tests.conftest import module_calls
from tests.lightning.workload import (
    DemoTransformerModule,
    SequentialModule,
    TinyGPTModule,
    loader,
    trainer,
)

QUIET = dict(cpu_sampling_hz=0, system_interval_ms=0)


def fit(tmp_path, callback, module=None, **kwargs):
    val = kwargs.pop("val", None)
    settings = dict(max_steps=6, default_root_dir=str(tmp_path), callbacks=[callback])
    trainer(**{**settings, **kwargs}).fit(module or TinyGPTModule(), loader(), val)
    return callback


def test_window_phases_and_modules_beside_the_scalars(tmp_path):
    assert is_available()
    callback = fit(tmp_path, DeepContextCallback(steps={"start": 2, "count": 3}, **QUIET))
    # the TensorBoard logger's version_0 is the run: the tab sits beside its scalars
    (path,) = callback.written
    assert path.relative_to(tmp_path).parts[:4] == (
        "lightning_logs",
        "version_0",
        "plugins",
        "deepcontext",
    )
    assert any(
        p.name.startswith("events.out.tfevents")
        for p in (tmp_path / "lightning_logs/version_0").iterdir()
    )
    (profile,), errors = load_profiles(tmp_path / "lightning_logs")
    assert errors == [] and profile.run == "version_0"
    assert (
        profile.steps == (2, 5) and len(profile.step_times_ns) == 3 and path.name == "steps-2-4.pb"
    )
    tree = profile.tree
    assert {tree.node_frame(n).name for n in tree.children(0)} >= {
        "forward",
        "backward",
        "optimizer",
    }
    (attn,) = [
        n
        for n in tree.find_all(lambda f: f.name == "net.blocks.0.attn")
        if tree.path_frames(n)[0].name == "forward"
    ]
    assert tree.node_frame(attn).detail == "SelfAttention" and module_calls(tree, attn) == 3
    backward = tree.find_all(lambda f: f.kind == "operator" and f.backward)
    assert any("net.blocks.0.attn" in [f.name for f in tree.path_frames(n)] for n in backward)


def test_regression_closure_forward_not_under_optimizer(tmp_path):
    # Lightning runs training_step inside optimizer.step(closure): it must stay in forward
    callback = fit(tmp_path, DeepContextCallback(steps={"start": 1, "count": 2}, **QUIET))
    (profile,), _ = load_profiles(callback.written[0].parents[3])
    tree = profile.tree
    steps = tree.find_all(lambda f: f.name == "TinyGPTModule.training_step")
    assert steps and {tree.path_frames(n)[0].name for n in steps} <= {"forward", "backward"}
    modules = tree.find_all(lambda f: f.kind == "module")
    assert all(tree.path_frames(n)[0].name != "optimizer" for n in modules)
    # Lightning's own frames are skipped: the user's training_step follows the script's frames
    assert not any("site-packages/lightning/" in f.file for n in steps for f in tree.path_frames(n))


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    callback = DeepContextCallback(steps={"start": 1, "count": 2}, **QUIET)
    fit(tmp_path, callback, max_steps=4, accumulate_grad_batches=2)
    (profile,), _ = load_profiles(tmp_path)
    assert profile.steps == (1, 3) and len(profile.step_times_ns) == 2
    tree = profile.tree
    (attn,) = [
        n
        for n in tree.find_all(lambda f: f.name == "net.blocks.0.attn")
        if tree.path_frames(n)[0].name == "forward"
    ]
    assert module_calls(tree, attn) == 4  # 2 optimizer steps × 2 micro-batches


def test_user_logdir_wins_and_validation_is_its_own_window(tmp_path, capsys):
    callback = DeepContextCallback(
        logdir=str(tmp_path / "prof"), steps={"start": 1, "count": 2}, profile_eval=True, **QUIET
    )
    fit(
        tmp_path,
        callback,
        max_steps=4,
        val=loader(batches=3),
        val_check_interval=4,
        num_sanity_val_steps=2,
    )
    profiles, _ = load_profiles(tmp_path / "prof")
    by_run = {p.run: p for p in profiles}
    assert sorted(by_run) == [".", "validation"]
    assert by_run["."].steps == (1, 3)
    validation = by_run["validation"]  # sanity-check batches are not counted
    assert validation.steps == (0, 2) and len(validation.step_times_ns) == 2
    assert "backward" not in {
        validation.tree.node_frame(n).name for n in validation.tree.children(0)
    }
    # two profiles, said once: the first, and how to open the logdir
    (said,) = [
        line
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("DeepContext wrote")
    ]
    assert said.startswith(f"DeepContext wrote {tmp_path / 'prof'}/") and said.endswith(
        f"or open the tab with `deepcontext view {tmp_path / 'prof'}`"
    )


def test_no_eval_window_by_default_and_nothing_outside_windows(tmp_path):
    callback = DeepContextCallback(
        logdir=str(tmp_path / "prof"), steps={"start": 100, "count": 1}, **QUIET
    )
    fit(tmp_path, callback, max_steps=3, val=loader(batches=2), val_check_interval=2)
    assert callback.written == [] and not (tmp_path / "prof").exists()


@pytest.mark.parametrize(
    "make, collected",
    [
        (lambda **kw: DeepContextCallback(memory=True, **kw), True),
        (lambda **kw: DeepContextCallback(ProfilerConfig(memory=True), **kw), True),
        (lambda **kw: DeepContextCallback(**kw), False),  # MEMORY_DEFAULT
    ],
    ids=["keyword", "config", "default"],
)
def test_memory_true_reaches_the_sessions_config(tmp_path, make, collected):
    import lightning.pytorch as pl

    seen = []

    class Spy(pl.Callback):  # runs after ours: the session is open
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(callback.session.config.collect_memory)

    # no window opens: only the config is looked at
    callback = make(logdir=str(tmp_path / "prof"), steps={"start": 100, "count": 1}, **QUIET)
    fit(tmp_path, callback, max_steps=2, callbacks=[callback, Spy()])
    assert seen == [collected, collected]


def test_pytorch_lightning_trainer_accepts_it(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    callback = DeepContextCallback(logdir=str(tmp_path), steps={"start": 1, "count": 1}, **QUIET)
    pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    ).fit(_pl_module(pl), loader())
    assert [p.name for p in callback.written] == ["steps-1-1.pb"]


def _pl_module(pl):
    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.inner = TinyGPTModule()

        def training_step(self, batch, batch_idx):
            return self.inner.loss(batch)

        def configure_optimizers(self):
            return self.inner.configure_optimizers()

    return Module()


def _modules(tree):
    """``{(name, class)}`` of the module frames under the forward phase."""
    return {
        (tree.node_frame(n).name, tree.node_frame(n).detail)
        for n in tree.find_all(lambda f: f.kind == "module")
        if tree.path_frames(n)[0].name == "forward"
    }


def test_regression_submodules_named_from_the_lightning_module(tmp_path):
    # training_step calls self.net first: it used to be the root, naming `Sequential`, `0`, `2`
    callback = fit(
        tmp_path,
        DeepContextCallback(steps={"start": 1, "count": 2}, **QUIET),
        SequentialModule(),
        max_steps=3,
    )
    (profile,), _ = load_profiles(tmp_path)
    assert _modules(profile.tree) == {
        ("net", "Sequential"),
        ("net.0", "Linear"),
        ("net.1", "ReLU"),
        ("net.2", "Linear"),
    }
    tree = profile.tree
    (second,) = [
        n
        for n in tree.find_all(lambda f: f.name == "net.2")
        if tree.path_frames(n)[0].name == "forward"
    ]
    assert [f.name for f in tree.path_frames(second) if f.kind == "module"] == ["net", "net.2"]
    assert [p.name for p in callback.written] == ["steps-1-2.pb"]


def test_regression_model_code_shipped_in_lightning_is_not_skipped(tmp_path):
    # lightning.pytorch.demos.Transformer is model code: its lines show; the trainer's do not
    import inspect

    import lightning
    from lightning.pytorch.demos import Transformer

    fit(
        tmp_path,
        DeepContextCallback(steps={"start": 1, "count": 2}, **QUIET),
        DemoTransformerModule(),
        max_steps=3,
    )
    (profile,), _ = load_profiles(tmp_path)
    tree = profile.tree
    frames = [tree.node_frame(n) for n in range(1, len(tree))]
    lines, first = inspect.getsourcelines(Transformer.forward)
    body = range(first + 1, first + len(lines))
    forward = {f.line for f in frames if f.kind == "python" and f.name == "Transformer.forward"}
    assert forward and forward <= set(body)
    assert {first + i for i, text in enumerate(lines) if "self.transformer(" in text} <= forward
    demo = {
        f.name
        for f in frames
        if f.kind == "python" and f.file.endswith("lightning/pytorch/demos/transformer.py")
    }
    assert demo == {
        "Transformer.forward",
        "Transformer.generate_square_subsequent_mask",
        "PositionalEncoding.forward",
    }
    package = os.path.dirname(lightning.__file__)
    machinery = {f.file for f in frames if f.file.startswith(package) and "/demos/" not in f.file}
    assert machinery == set()
    assert ("model.transformer.encoder.layers.1", "TransformerEncoderLayer") in _modules(tree)


def test_gradient_clipping_is_part_of_the_update(tmp_path):
    fit(
        tmp_path,
        DeepContextCallback(steps={"start": 2, "count": 2}, **QUIET),
        gradient_clip_val=0.5,
    )
    (profile,), _ = load_profiles(tmp_path / "lightning_logs")
    tree = profile.tree
    norms = tree.find_all(lambda f: f.kind == "operator" and "_foreach_norm" in f.name)
    assert norms and {tree.path_frames(n)[0].name for n in norms} == {"optimizer"}


def test_regression_a_second_fit_still_unwinds_native_stacks(tmp_path):
    """Lightning sets every signal back to the handler Python recorded at
    start-up when a fit ends, the native sampler's unwind signal too: with
    SIGPROF, the next comprehensive window's sampler ended the process."""
    for run in ("first", "second"):
        callback = DeepContextCallback(
            mode="comprehensive",
            steps={"start": 1, "count": 12},
            cpu_sampling_hz=1000,
            system_interval_ms=0,
        )
        # a window long enough that some ticks land in native code whatever the host's load
        fit(tmp_path / run, callback, max_steps=14)
    (profile,), errors = load_profiles(tmp_path / "second" / "lightning_logs")
    tree = profile.tree
    native = [
        n
        for n in range(len(tree))
        if tree.node_frame(n).kind == "native" and tree.value(n, "samples")
    ]
    assert errors == [] and native, sum(tree.value(n, "samples") for n in range(len(tree)))
