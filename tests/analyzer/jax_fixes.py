"""Fixable problems of JAX training loops, as ``fixes.py`` has them for
PyTorch: each a loop run with the problem (``fixed`` False) or with its fix
(True), profiled with dc_jax, returning the one profile it wrote with its
findings."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

import dc_jax
from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile
from dc_core.store.profile import Profile
from tests.analyzer.helpers import analysed

#: The rows the planted loop adds one by one: a step saves about 1 ms a row.
ROWS = 40

#: Two steps first: an eager loop compiles each of its operations in the first.
WINDOW = StepRange(start=2, count=6)


def _train(logdir, step: Callable[[jax.Array], jax.Array], w: jax.Array) -> Profile:
    with dc_jax.profile(logdir=str(logdir), steps=WINDOW) as prof:
        for _ in range(WINDOW.start + WINDOW.count + 1):
            w = step(w)
            w.block_until_ready()
            prof.step()
    (path,) = prof.written
    return analysed(read_profile(path))


def run_dtype(logdir, fixed: bool) -> Profile:
    """Inputs kept in bfloat16 and cast to float32 inside the jitted step, or
    cast once before training. The model is small: the cast is most of the
    step. (The cast's output is a new buffer each step, which its consumer
    may read slower than a buffer kept across steps: with 16 features instead
    of 128, the matmul took 3x longer after the cast, and the fix saved 1.4x
    the cast's own time.)"""
    stored = jax.random.normal(jax.random.PRNGKey(0), (1 << 17, 128), dtype=jnp.bfloat16)
    inputs = stored.astype(jnp.float32) if fixed else stored

    @jax.jit
    def step(w, x):
        def loss(w):
            x32 = x if fixed else x.astype(jnp.float32)
            return jnp.square(x32 @ w).mean()

        return w - 1e-3 * jax.grad(loss)(w)

    return _train(logdir, lambda w: step(w, inputs), jnp.ones((128, 8)))


def run_loop(logdir, fixed: bool) -> Profile:
    """A sum over rows written as a Python loop, run eagerly (each addition
    and each row read a dispatch of its own, forward and backward), or as one
    ``lax.scan``."""
    x = jax.random.normal(jax.random.PRNGKey(0), (ROWS, 64))

    def rowsum(w):
        h = x @ w
        if fixed:
            total, _ = lax.scan(lambda carry, row: (carry + row, None), jnp.zeros(64), h)
            return total
        total = jnp.zeros(64)
        for i in range(h.shape[0]):
            total = total + h[i]
        return total

    grad = jax.grad(lambda w: jnp.square(rowsum(w)).mean())
    return _train(logdir, lambda w: w - 1e-3 * grad(w), jnp.ones((64, 64)))


#: name -> (runner, the rule that must find it, a frame its path names)
PROBLEMS = {
    "jax_dtype": (run_dtype, "dtype_conversion", "run_dtype.<locals>.step.<locals>.loss"),
    "jax_loop": (run_loop, "small_ops", "run_loop.<locals>.rowsum"),
}
