"""Tiny Flax NNX models trained as NNX users write it: ``nnx.jit`` over
``nnx.value_and_grad`` and ``nnx.Optimizer``, or ``jax.jit`` over ``nnx.split``/``merge``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    """Named layers and a list of layers called in a loop from one line."""

    def __init__(self, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(8, 32, rngs=rngs)
        self.layers = nnx.List([nnx.Linear(32, 32, rngs=rngs) for _ in range(2)])
        self.linear2 = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        for layer in self.layers:
            x = nnx.relu(layer(x))
        return self.linear2(x)


class FeedForward(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs):
        self.up = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.down = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x):
        return self.down(nnx.gelu(self.up(x)))


class Block(nnx.Module):
    """A pre-norm transformer block."""

    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=heads, in_features=dim, decode=False, rngs=rngs
        )
        self.norm2 = nnx.LayerNorm(dim, rngs=rngs)
        self.mlp = FeedForward(dim, rngs)

    def __call__(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Classifier(nnx.Module):
    def __init__(self, dim: int, rngs: nnx.Rngs):
        self.block = Block(dim, 2, rngs)
        self.head = nnx.Linear(dim, 10, rngs=rngs)

    def __call__(self, x):
        return self.head(self.block(x).mean(axis=1))


def nnx_loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


def nnx_training(model: nnx.Module, x: jax.Array):
    """(train_step, state, batch); ``train_step(state, x, y)`` → (state, loss), the
    state (model, optimizer) updated in place as NNX does."""
    y = jnp.arange(x.shape[0]) % 10
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def nnx_train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(nnx_loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    def train_step(state, x, y):
        return state, nnx_train_step(*state, x, y)

    return train_step, (model, optimizer), (x, y)


def split_training(model: nnx.Module, x: jax.Array):
    """The functional form: ``jax.jit`` over the split graph and state, optax by hand."""
    y = jnp.arange(x.shape[0]) % 10
    graphdef, params = nnx.split(model)
    tx = optax.adam(1e-3)

    def split_loss_fn(params, x, y):
        return nnx_loss_fn(nnx.merge(graphdef, params), x, y)

    @jax.jit
    def train_step(state, x, y):
        params, opt = state
        loss, grads = jax.value_and_grad(split_loss_fn)(params, x, y)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    return train_step, (params, tx.init(params)), (x, y)


def mlp_training():
    return nnx_training(MLP(nnx.Rngs(0)), jnp.ones((16, 8)))


def block_training():
    return nnx_training(Classifier(16, nnx.Rngs(0)), jnp.ones((4, 6, 16)))


def split_mlp_training():
    return split_training(MLP(nnx.Rngs(0)), jnp.ones((16, 8)))
