"""Flax NNX models under ``dc_jax.profile``: module frames named by the model's
attribute paths (``MLP/layers/0``), classes as detail, timed matmuls under them."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
pytest.importorskip("optax")

import jax
import jax.numpy as jnp

import dc_jax
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from dc_jax.nnx_hooks import NnxScopes
from tests.jax import nnx_workloads as workloads
from tests.jax.helpers import nodes as _nodes

DC_JAX_DIR = os.path.dirname(os.path.abspath(dc_jax.__file__)) + os.sep


def _train(tmp_path, training, steps: int, window: StepRange):
    """Profile ``steps`` steps; the step is traced at step 0, inside the profiler, before the window."""
    train_step, state, (x, y) = training
    with dc_jax.profile(
        logdir=str(tmp_path), steps=window, cpu_sampling_hz=0, system_interval_ms=0
    ) as prof:
        for _ in range(steps):
            state, loss = train_step(state, x, y)
            prof.step()
    (profile,) = [read_profile(p) for p in prof.written]
    return profile


def _under(tree, node, name):
    """Whether module ``name`` is on ``node``'s path."""
    return any(f.kind == "module" and f.name == name for f in tree.path_frames(node)[:-1])


def _modules(tree):
    return {tree.node_frame(n).name: tree.node_frame(n).detail for n in _nodes(tree, "module")}


def _model_paths(model, root):
    """The model's own module tree, written as module frames name it."""
    return {
        "/".join((root, *map(str, path))): type(m).__name__
        for path, m in nnx.iter_modules(model)
        if path
    }


def _matmuls(tree, module, backward):
    return [
        n
        for n in _nodes(tree, "operator", "dot_general", backward)
        if tree.path_frames(n)[-2].name == module
    ]


@pytest.mark.slow
def test_mlp_modules_are_named_by_attribute_path_with_timed_matmuls(tmp_path):
    training = workloads.mlp_training()
    model = training[1][0]
    profile = _train(tmp_path, training, steps=6, window=StepRange(start=2, count=3))
    tree = profile.tree
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
    op_time = tree.inclusive("device_time_ns")  # XLA op time (the CPU device's)
    expected = {
        "MLP/linear1": "Linear",
        "MLP/layers/0": "Linear",
        "MLP/layers/1": "Linear",
        "MLP/linear2": "Linear",
    }
    # ``layers`` (an nnx.List, never called) is in the model tree but not a frame.
    assert _model_paths(model, "MLP") == {**expected, "MLP/layers": "List"}
    assert _modules(tree) == {"MLP": "MLP", **expected}
    for module in expected:
        (forward,) = _matmuls(tree, module, backward=False)
        backward = _matmuls(tree, module, backward=True)
        # dW, and dx but for the input
        assert len(backward) == (1 if module == "MLP/linear1" else 2), module
        path = tree.path_frames(forward)
        names = [f.name.rsplit(".<locals>.", 1)[-1] for f in path]
        assert names == [
            "forward",
            "nnx_train_step",
            "nnx_loss_fn",
            "MLP",
            "MLP.__call__",
            module,
            "dot_general",
        ]
        assert [f.kind for f in path[3:6]] == ["module", "python", "module"]
        assert path[5].detail == "Linear" and path[2].file.endswith("nnx_workloads.py")
        for op in backward:
            back = tree.path_frames(op)
            assert back[0].name == "backward" and back[-1].backward
            # the forward context
            assert [f.name for f in back[1:-1]] == [f.name for f in path[1:-1]]
        for op in (forward, *backward):
            assert tree.value(op, "count") == 3 and op_time[op] > 0
    optimizer = tree.find("optimizer")
    assert optimizer is not None and op_time[optimizer] > 0
    # executions are counted on the op, once: its kernel adds none to its inclusive count
    count = tree.inclusive("count")
    assert all(count[n] == 0 and count[tree.parent[n]] == 3 for n in _nodes(tree, "kernel"))
    # The call wrappers never show as the user's frames, and are gone afterwards.
    assert not [n for n in _nodes(tree, "python") if tree.node_frame(n).file.startswith(DC_JAX_DIR)]
    assert not hasattr(nnx.Linear.__call__, "__deepcontext_nnx__")


@pytest.mark.slow
def test_transformer_block_modules_match_the_nnx_module_tree(tmp_path):
    training = workloads.block_training()
    model = training[1][0]
    profile = _train(tmp_path, training, steps=3, window=StepRange(start=1, count=2))
    tree = profile.tree
    modules = _modules(tree)
    attention = "Classifier/block/attn"
    model_tree = _model_paths(model, "Classifier")
    assert model_tree[attention] == "MultiHeadAttention"
    # Every module frame is a module of the model, under its own class; every
    # module with parameters shows up.
    assert {
        name: cls for name, cls in modules.items() if name != "Classifier"
    }.items() <= model_tree.items()
    assert {f"{attention}/{p}" for p in ("query", "key", "value", "out")} | {
        "Classifier/block/mlp/up",
        "Classifier/block/mlp/down",
        "Classifier/block/norm1",
        "Classifier/head",
    } <= set(modules)
    assert (
        modules[f"{attention}/query"] == "LinearGeneral"
        and modules["Classifier/block/mlp"] == "FeedForward"
    )
    for module in (f"{attention}/query", "Classifier/block/mlp/up", "Classifier/head"):
        forward, backward = _matmuls(tree, module, False), _matmuls(tree, module, True)
        assert len(forward) == 1 and backward, module
        assert all(tree.value(n, "count") == 2 for n in forward + backward)
        assert tree.path_frames(backward[0])[0].name == "backward"
    # Attention's own matmuls (scores, weighted values) sit right under the
    # attention module, not under an einsum-spec pseudo-module.
    own = _matmuls(tree, attention, False)
    assert len(own) == 2 and all(tree.value(n, "count") == 2 for n in own)


@pytest.mark.slow
def test_jax_jit_over_split_and_merge_names_modules_too(tmp_path):
    profile = _train(
        tmp_path, workloads.split_mlp_training(), steps=3, window=StepRange(start=1, count=2)
    )
    tree = profile.tree
    assert _modules(tree) == {
        "MLP": "MLP",
        "MLP/linear1": "Linear",
        "MLP/layers/0": "Linear",
        "MLP/layers/1": "Linear",
        "MLP/linear2": "Linear",
    }
    (forward,) = _matmuls(tree, "MLP/layers/1", False)
    names = [f.name.rsplit(".<locals>.", 1)[-1] for f in tree.path_frames(forward)]
    assert names == [
        "forward",
        "train_step",
        "split_loss_fn",
        "nnx_loss_fn",
        "MLP",
        "MLP.__call__",
        "MLP/layers/1",
        "dot_general",
    ]
    assert tree.value(forward, "count") == 2
    assert len(_matmuls(tree, "MLP/layers/1", True)) == 2
    assert tree.find("optimizer") is not None


class _Doubled(nnx.Linear):
    def __call__(self, x):
        return super().__call__(x) * 2


class _Net(nnx.Module):
    def __init__(self, rngs):
        self.proj = _Doubled(4, 4, rngs=rngs)
        self.blocks = nnx.List([nnx.Linear(4, 4, rngs=rngs)])

    def __call__(self, x):
        return self.blocks[0](self.proj(x))


def test_nnx_scopes_name_traced_calls_only_and_restore_the_classes():
    model, x = _Net(nnx.Rngs(0)), jnp.ones((2, 4))
    original = nnx.Linear.__call__
    scopes = NnxScopes()
    assert scopes.start()
    try:
        assert nnx.Linear.__call__ is not original
        model(x)  # eager: passes straight through
        assert scopes.classes == {}
        graphdef, state = nnx.split(model)
        text = (
            jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(state, x).as_text(debug_info=True)
        )
    finally:
        scopes.stop()
    assert nnx.Linear.__call__ is original and _Doubled.__call__.__name__ == "__call__"
    assert "_Net/proj/dot_general" in text and "_Net/blocks/0/dot_general" in text
    assert "proj/proj" not in text  # super().__call__ stays in its module's scope
    assert scopes.classes == {"_Net": "_Net", "_Net/proj": "_Doubled", "_Net/blocks/0": "Linear"}


@pytest.mark.slow
def test_step_traced_before_the_profiler_keeps_the_users_calling_lines(tmp_path, caplog):
    # Without the profiler at trace time there are no NNX scopes: no module
    # frames (said once), but each matmul still sits under the model line that called it.
    training = workloads.mlp_training()
    train_step, state, (x, y) = training
    train_step(state, x, y)
    with caplog.at_level("WARNING", logger="deepcontext"):
        tree = _train(tmp_path, training, steps=3, window=StepRange(start=1, count=2)).tree
    warned = [r.getMessage() for r in caplog.records if "no module frames" in r.getMessage()]
    assert len(warned) == 1 and "compiled before the profiler started" in warned[0]
    assert _modules(tree) == {}
    lines = sorted(
        tree.path_frames(n)[-2].line for n in _nodes(tree, "operator", "dot_general", False)
    )
    call = workloads.MLP.__call__.__code__.co_firstlineno
    assert lines == [call + 1, call + 3, call + 3, call + 4]  # linear1, layers (twice), linear2


@pytest.mark.slow
def test_classes_defined_in_the_profilers_life_and_scanned_or_vmapped_blocks_are_named(
    tmp_path, caplog
):
    # Regression: classes defined after dc_jax.profile() was entered were wrapped only
    # when a window opened, after the step was traced (no module names, and a warning
    # blaming compilation); Blocks run by nnx.scan / nnx.vmap are copies the transform
    # makes, not in the model's module tree: they never got a module frame.
    prof = dc_jax.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=2),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    )
    with caplog.at_level("WARNING", logger="deepcontext"), prof:

        class Block(nnx.Module):
            def __init__(self, rngs):
                self.lin = nnx.Linear(16, 16, rngs=rngs)
                self.norm = nnx.LayerNorm(16, rngs=rngs)

            def __call__(self, x):
                return x + nnx.relu(self.lin(self.norm(x)))

        class Stack(nnx.Module):  # Blocks stacked by nnx.vmap, run by nnx.scan
            def __init__(self, rngs):
                self.blocks = nnx.split_rngs(splits=3)(nnx.vmap(Block, in_axes=0, out_axes=0))(rngs)
                self.head = nnx.Linear(16, 10, rngs=rngs)

            def __call__(self, x):
                scan = nnx.scan(
                    lambda x, block: (block(x), None),
                    in_axes=(nnx.Carry, 0),
                    out_axes=(nnx.Carry, 0),
                )
                return self.head(scan(x, self.blocks)[0])

        class Ensemble(nnx.Module):  # Blocks stacked and run by nnx.vmap
            def __init__(self, rngs):
                self.members = nnx.split_rngs(splits=2)(nnx.vmap(Block, in_axes=0, out_axes=0))(
                    rngs
                )
                self.stack = Stack(rngs)

            def __call__(self, x):
                each = nnx.vmap(lambda block, x: block(x), in_axes=(0, None), out_axes=0)
                return self.stack(each(self.members, x).mean(axis=0))

        train_step, state, (x, y) = workloads.nnx_training(Ensemble(nnx.Rngs(0)), jnp.ones((8, 16)))
        for _ in range(3):
            state, loss = train_step(state, x, y)
            prof.step()
    # restored, as every class
    assert not Block.__dict__["__call__"].__dict__.get("__deepcontext_nnx__")
    assert "__init_subclass__" not in nnx.Module.__dict__
    assert not [r for r in caplog.records if "no module frames" in r.getMessage()]
    tree = read_profile(prof.written[0]).tree
    assert _modules(tree) == {
        "Ensemble": "Ensemble",
        "Ensemble/members": "Block",
        "Ensemble/members/lin": "Linear",
        "Ensemble/members/norm": "LayerNorm",
        "Ensemble/stack": "Stack",
        "Ensemble/stack/blocks": "Block",
        "Ensemble/stack/blocks/lin": "Linear",
        "Ensemble/stack/blocks/norm": "LayerNorm",
        "Ensemble/stack/head": "Linear",
    }
    # a scan runs its body 3x
    for blocks, runs in (
        ("Ensemble/members", 1),
        ("Ensemble/stack/blocks", 3),
    ):
        (forward,) = _matmuls(tree, f"{blocks}/lin", backward=False)
        path = tree.path_frames(forward)
        at = [f.name for f in path].index(blocks)
        assert path[at + 1].name.endswith("Block.__call__") and path[at + 1].kind == "python"
        assert tree.value(forward, "count") == 2 * runs and _matmuls(
            tree, f"{blocks}/lin", backward=True
        )
    scanned = tree.path_frames(_matmuls(tree, "Ensemble/stack/blocks/lin", backward=False)[0])
    # run by the scan's loop
    assert "loop body" in {f.detail for f in scanned if f.kind == "python"}
