"""JAX transformations and ops XLA kept no metadata for, placed where they ran:
``lax.scan`` + ``jax.checkpoint`` + ``lax.cond``, and Linen and NNX CNNs' gradients."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tests.invariants import violations
from tests.jax.helpers import (
    assert_ops_match_the_trace,
    kernel_shaped_convolutions,
    live_hlo,
    nodes,
    profile_with_trace,
    raw_op_times,
)

JAX_SCOPES = {
    "while",
    "body",
    "closed_call",
    "checkpoint",
    "rematted_computation",
    "cond",
    "branch_0_fun",
    "branch_1_fun",
}


class Looped(nn.Module):
    @nn.compact
    def __call__(self, x, flag):
        def body(carry, _):
            return jax.checkpoint(lambda c: jnp.tanh(c @ jnp.ones((64, 64))))(carry), None

        x, _ = jax.lax.scan(body, x, None, length=3)
        x = jax.lax.cond(flag, lambda v: v * 2, lambda v: jnp.sin(v), x)
        return nn.Dense(10)(x)


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(16, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.Dropout(0.1, deterministic=not train)(nn.relu(x))
        x = nn.Conv(32, (3, 3), strides=2)(x)
        return nn.Dense(10)(x.mean(axis=(1, 2)))


def _line_of(function, text: str) -> int:
    source, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(source) if text in line)


def _op_time_matches_the_trace(profile, raw) -> None:
    assert_ops_match_the_trace(profile.tree, raw)


@pytest.mark.slow
def test_scan_remat_cond_show_the_users_frames_once_with_transform_markers(tmp_path):
    model = Looped()
    x, y = jnp.ones((32, 64)), jnp.arange(32) % 10
    params = model.init(jax.random.PRNGKey(0), x, True)
    tx = optax.sgd(0.1)

    def loss(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(
            model.apply(params, x, False), y
        ).mean()

    @jax.jit
    def sgd_step(params, opt, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, value

    state = [params, tx.init(params)]

    def step():
        state[0], state[1], value = sgd_step(state[0], state[1], x, y)
        value.block_until_ready()

    step()
    profile, raw = profile_with_trace(tmp_path, step)
    tree = profile.tree
    _op_time_matches_the_trace(profile, raw)
    for op in nodes(tree, "operator"):
        frames = tree.path_frames(op)
        python = [(f.file, f.line, f.name) for f in frames if f.kind == "python"]
        assert len(python) == len(set(python)), [f.label() for f in frames]  # no frame repeated
        assert not any(
            f.kind == "module" and f.name.rsplit("/", 1)[-1] in JAX_SCOPES for f in frames
        )

    def marked(marker):
        return {
            (f.name.rsplit(".", 1)[-1], f.line)
            for f in tree.frames
            if f.kind == "python" and f.detail == marker
        }

    body_line = _line_of(Looped.__call__, "jax.checkpoint(lambda")
    assert ("body", body_line) in marked("loop body")
    assert ("<lambda>", body_line) in marked("remat")
    assert ("<lambda>", _line_of(Looped.__call__, "lax.cond")) in marked("cond branch 0")
    # the checkpointed matmul: under the user's lambda, not under a `checkpoint` scope
    matmul = [
        n
        for n in nodes(tree, "operator", "dot_general", backward=False)
        if any(f.detail == "remat" for f in tree.path_frames(n))
    ]
    assert matmul and all(tree.path_frames(n)[0].name == "forward" for n in matmul)


@pytest.mark.slow
def test_cnn_weight_gradient_conv_sits_under_backward_and_its_conv_module(tmp_path):
    model = CNN()
    x, y = jnp.ones((16, 16, 16, 3)), jnp.arange(16) % 10
    variables = model.init(
        {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}, x, False
    )
    tx = optax.adam(1e-3)

    def loss_fn(params, stats, rng):
        logits, updated = model.apply(
            {"params": params, "batch_stats": stats},
            x,
            True,
            rngs={"dropout": rng},
            mutable=["batch_stats"],
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updated[
            "batch_stats"
        ]

    @jax.jit
    def train_step(params, stats, opt, rng):
        (value, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, rng)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), stats, opt, value

    state = [variables["params"], variables["batch_stats"], tx.init(variables["params"])]

    rng = jax.random.PRNGKey(2)

    def step():
        *state[:], value = train_step(*state, rng)
        value.block_until_ready()

    step()
    profile, raw = profile_with_trace(tmp_path, step)
    tree = profile.tree
    _op_time_matches_the_trace(profile, raw)
    time = tree.inclusive("device_time_ns")
    convs = [
        n
        for n in nodes(tree, "operator", "conv_general_dilated", backward=True)
        if any(f.kind == "module" and f.name == "CNN/Conv_0" for f in tree.path_frames(n))
    ]
    # FLOPs of Conv_0's forward conv: 2 × output elements × (3·3 window × 3 input features), 2 runs
    forward = [
        n
        for n in nodes(tree, "operator", "conv_general_dilated", backward=False)
        if any(f.kind == "module" and f.name == "CNN/Conv_0" for f in tree.path_frames(n))
    ]
    assert len(forward) == 1 and tree.value(forward[0], "count") == 2
    assert tree.value(forward[0], "flops") == 2 * 2 * (16 * 16 * 16 * 16) * (3 * 3 * 3)
    # Conv_0 reads the input, so its only backward conv is its weight gradient
    assert len(convs) == 1 and time[convs[0]] > 0
    assert tree.path_frames(convs[0])[0].name == "backward"
    # what XLA left without metadata is placed, not parked at the program's top level
    for n in nodes(tree, "compiled", "jit_train_step"):
        assert not [k for k in tree.children(n) if tree.node_frame(k).kind == "operator"], (
            tree.path_frames(n)
        )


class MnistCNN(nn.Module):
    """flax's ``examples/mnist`` CNN with a BatchNorm after each Conv: one input feature."""

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(16, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.Conv(32, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


def assert_weight_gradients_under_their_convs(
    profile, raw: str, program: str, kernels: dict[str, tuple]
) -> None:
    """Each conv's weight gradient, found in JAX's own HLO text (a convolution whose
    output has the conv's kernel shape) and in the raw trace, is in the tree under
    ``backward › … › <conv module>`` with the trace's time, and no BatchNorm holds a conv."""
    tree = profile.tree
    time = tree.inclusive("device_time_ns")
    texts = live_hlo(program)
    traced = {op: ns for ops in raw_op_times(raw).values() for op, ns in ops.items()}
    bare = 0
    for module, shape in kernels.items():
        found = {}
        for text in texts:
            found.update(kernel_shaped_convolutions(text, shape))
        # one weight gradient per conv
        ((wgrad, has_metadata),) = [(n, m) for n, m in found.items() if n in traced]
        bare += not has_metadata
        ops = [n for n in nodes(tree, "operator") if tree.node_frame(n).detail == wgrad]
        assert ops and sum(time[n] for n in ops) == traced[wgrad], module
        for op in ops:
            path = tree.path_frames(op)
            assert (
                path[0].name == "backward"
                and path[-1].backward
                and path[-1].name == "conv_general_dilated"
            )
            modules = [f.name for f in path if f.kind == "module"]
            assert modules[-1] == module, [f.label() for f in path]
    assert bare, "XLA kept every weight gradient's metadata: this test no longer pins the bug"
    for op in nodes(tree, "operator", "conv_general_dilated"):
        assert not any(
            f.kind == "module" and "BatchNorm" in f.name for f in tree.path_frames(op)
        ), [f.label() for f in tree.path_frames(op)]


@pytest.mark.slow
def test_a_linen_conv_weight_gradient_is_not_billed_to_the_batchnorm_after_it(tmp_path):
    # Regression (flax examples/mnist with BatchNorm): XLA keeps no metadata for the
    # first conv's weight gradient; placed by its operands it landed under BatchNorm_0,
    # with a false backward_imbalance there.
    model = MnistCNN()
    x, y = jnp.ones((16, 16, 16, 1)), jnp.arange(16) % 10
    variables = model.init(jax.random.PRNGKey(0), x, False)
    tx = optax.adam(1e-3)

    def loss_fn(params, stats, x):
        logits, updated = model.apply(
            {"params": params, "batch_stats": stats}, x, True, mutable=["batch_stats"]
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updated[
            "batch_stats"
        ]

    @jax.jit
    def train_step(params, stats, opt, x):
        (value, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, x)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), stats, opt, value

    state = [variables["params"], variables["batch_stats"], tx.init(variables["params"])]

    def step():
        *state[:], value = train_step(*state, x)
        value.block_until_ready()

    step()
    profile, raw = profile_with_trace(tmp_path, step)
    assert_ops_match_the_trace(profile.tree, raw)
    kernels = {
        f"MnistCNN/Conv_{i}": variables["params"][f"Conv_{i}"]["kernel"].shape for i in (0, 1)
    }
    assert_weight_gradients_under_their_convs(profile, raw, "jit_train_step", kernels)
    assert violations(profile) == []


class NnxConvNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 8, (3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(8, rngs=rngs)
        self.conv2 = nnx.Conv(8, 16, (3, 3), rngs=rngs)
        self.bn2 = nnx.BatchNorm(16, rngs=rngs)
        self.head = nnx.Linear(16, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn1(self.conv1(x)))
        x = nnx.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean(axis=(1, 2)))


@pytest.mark.slow
def test_an_nnx_conv_weight_gradient_is_not_billed_to_the_batchnorm_after_it(tmp_path):
    model = NnxConvNet(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    x, y = jnp.ones((8, 16, 16, 1)), jnp.arange(8) % 10

    def loss_fn(model, x):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    @nnx.jit
    def nnx_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x)
        optimizer.update(model, grads)
        return loss

    def step():
        nnx_step(model, optimizer, x).block_until_ready()

    # traced at step 0, under the profiler's NNX scopes
    profile, raw = profile_with_trace(tmp_path, step)
    assert_ops_match_the_trace(profile.tree, raw)
    kernels = {
        f"NnxConvNet/{conv}": getattr(model, conv).kernel[...].shape for conv in ("conv1", "conv2")
    }
    assert_weight_gradients_under_their_convs(profile, raw, "jit_nnx_step", kernels)
    assert violations(profile) == []
