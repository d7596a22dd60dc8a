"""Step time of a Flax transformer block trained on CPU: unprofiled, under
``jax.profiler.trace`` alone, and inside a DeepContext window; plus the time
to convert a window's trace and the profile's size against the raw trace.

    PYTHONPATH=. python benchmarks/jax_overhead.py [--steps 20] [--dim 128]

One run, no repetitions: the numbers are indicative, not statistics.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def build(dim: int, seq: int, batch: int):
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=4)(h, h)
            h = nn.gelu(nn.Dense(4 * dim)(nn.LayerNorm()(x)))
            return x + nn.Dense(dim)(h)

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = Block()(x)
            return nn.Dense(10)(x.mean(axis=1))

    model = Model()
    x = jnp.ones((batch, seq, dim))
    y = jnp.arange(batch) % 10
    params = model.init(jax.random.PRNGKey(0), x)
    tx = optax.adamw(1e-3)

    def loss_fn(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y).mean()

    @jax.jit
    def train_step(state, x, y):
        params, opt = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    return train_step, (params, tx.init(params)), x, y


def run_steps(train_step, state, x, y, steps: int, after_step=None) -> tuple[list[float], object]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, loss = train_step(state, x, y)
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
        if after_step is not None:
            after_step()
    return times, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    import jax

    import dc_jax
    from dc_core.record.config import StepRange

    train_step, state, x, y = build(args.dim, args.seq, args.batch)
    _, state = run_steps(train_step, state, x, y, 3)  # compile and warm up

    plain, state = run_steps(train_step, state, x, y, args.steps)

    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            traced, state = run_steps(train_step, state, x, y, args.steps)

    with tempfile.TemporaryDirectory() as logdir:
        prof = dc_jax.Profiler(logdir=logdir, steps=StepRange(start=1, count=args.steps))
        prof.start()
        _, state = run_steps(train_step, state, x, y, 1, prof.step)  # step 0: before the window
        window_start = time.perf_counter()
        profiled, state = run_steps(train_step, state, x, y, args.steps, prof.step)
        window_wall = time.perf_counter() - window_start
        prof.stop()
        adapter = prof.adapter
        (path,) = prof.written
        profile_bytes = os.path.getsize(path)

    base = statistics.median(plain)
    print(
        f"model: 2 transformer blocks, dim {args.dim}, seq {args.seq}, batch {args.batch}; "
        f"{args.steps} steps each; backend {jax.default_backend()}"
    )
    print(f"median step, unprofiled:            {base * 1e3:8.2f} ms  (1.00x)")
    print(
        f"median step, jax.profiler.trace:    {statistics.median(traced) * 1e3:8.2f} ms  "
        f"({statistics.median(traced) / base:.2f}x)"
    )
    print(
        f"median step, DeepContext window:    {statistics.median(profiled) * 1e3:8.2f} ms  "
        f"({statistics.median(profiled) / base:.2f}x)"
    )
    print(
        f"window wall incl. open/close:       {window_wall * 1e3:8.2f} ms  "
        f"({window_wall / (base * args.steps):.2f}x the unprofiled steps)"
    )
    print(f"stop_trace (jax's export) at close: {adapter.last_stop_ns / 1e6:8.2f} ms")
    print(f"trace conversion at window close:   {adapter.last_convert_ns / 1e6:8.2f} ms")
    print(f"raw trace (xplane.pb):              {adapter.last_trace_bytes:8d} bytes")
    print(
        f"DeepContext profile:                {profile_bytes:8d} bytes  "
        f"({profile_bytes / max(adapter.last_trace_bytes, 1):.3f}x the raw trace)"
    )


if __name__ == "__main__":
    main()
