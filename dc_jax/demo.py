"""The JAX demo: a small Flax CNN trained with a jitted ``value_and_grad`` step and Adam.

This file is named ``demo*.py`` so the profiler treats it as user code: its
lines appear in profiles like any training script's. It prints nothing itself.
"""

from __future__ import annotations

import pathlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class CNN(nn.Module):
    """Two convolutions and a classifier head over 28×28 single-channel images."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.relu(nn.Conv(32, (3, 3), strides=2)(x))
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(10)(nn.relu(nn.Dense(64)(x)))


def loss_fn(params: Any, model: CNN, x: jax.Array, y: jax.Array) -> jax.Array:
    logits = model.apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_workload(batch: int = 16) -> tuple[Any, Any, tuple[jax.Array, jax.Array]]:
    """(train_step, state, (x, y)) for the CNN on a fixed random batch."""
    model, tx = CNN(), optax.adam(1e-3)
    key_x, key_init = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(key_x, (batch, 28, 28, 1))
    y = jnp.arange(batch) % 10
    params = model.init(key_init, x)

    @jax.jit
    def train_step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        params, opt = state
        loss, grads = jax.value_and_grad(loss_fn)(params, model, x, y)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    return train_step, (params, tx.init(params)), (x, y)


def run_demo(logdir: str, steps: int = 8, **overrides: Any) -> list[pathlib.Path]:
    """Train the CNN for ``steps`` steps with a window over steps 2.. and
    return the profile files written under ``logdir``."""
    from dc_jax import profile

    train_step, state, (x, y) = make_workload()
    window = {"start": min(2, steps - 1), "count": max(1, min(4, steps - 2))}
    with profile(logdir=str(logdir), steps=window, **overrides) as prof:
        for _ in range(steps):
            state, loss = train_step(state, x, y)
            loss.block_until_ready()
            prof.step()
    return list(prof.written)
