"""Tiny Flax models trained with a jitted ``value_and_grad`` step, as users write them."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(32)(x)
        x = nn.relu(x)
        return nn.Dense(10)(x)


class Block(nn.Module):
    """A pre-norm transformer block with a user-named projection."""

    heads: int = 2

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
        h = nn.LayerNorm()(x)
        h = nn.gelu(nn.Dense(4 * x.shape[-1])(h))
        return x + nn.Dense(x.shape[-1], name="proj")(h)


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(Block()(x).mean(axis=1))


def my_loss_fn(params, model, x, y):
    logits = model.apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_training(model: nn.Module, x: jax.Array):
    """(train_step, state, batch) for ``model`` on input ``x`` and 10 classes."""
    y = jnp.arange(x.shape[0]) % 10
    params = model.init(jax.random.PRNGKey(0), x)
    tx = optax.adam(1e-3)

    @jax.jit
    def train_step(state, x, y):
        params, opt = state
        loss, grads = jax.value_and_grad(my_loss_fn)(params, model, x, y)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    return train_step, (params, tx.init(params)), (x, y)


def mlp_training():
    return make_training(MLP(), jnp.ones((16, 8)))


def block_training():
    return make_training(Classifier(), jnp.ones((4, 6, 16)))
