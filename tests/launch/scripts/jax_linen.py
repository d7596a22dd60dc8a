"""A Flax (Linen) training script that knows nothing of any profiler: a jitted
train step called in a loop, its state donated; a jitted eval called from
other lines; the step lowered once for its cost analysis; a jitted helper
called inside the step."""

import argparse
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(10)(x)


model = MLP()
tx = optax.sgd(0.1)


@jax.jit
def standardize(x):
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)


def loss_fn(params, x, y):
    for _ in range(3):  # a jitted helper called from one line while the step is traced: not a step
        x = standardize(x)
    logits = model.apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@partial(jax.jit, donate_argnums=0)
def train_step(state, batch):
    params, opt_state = state
    loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss


@jax.jit
def evaluate(params, batch):
    x, y = batch
    return jnp.mean(jnp.argmax(model.apply(params, x), -1) == y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    x = jax.random.normal(jax.random.PRNGKey(0), (32, 16))
    y = jnp.arange(32) % 10
    params = model.init(jax.random.PRNGKey(1), x)
    state = (params, tx.init(params))
    flops = train_step.lower(state, (x, y)).compile().cost_analysis()
    print("lowered", train_step.__name__, bool(flops))
    print("eval before", float(evaluate(state[0], (x, y))))
    for step in range(args.steps):
        old = state
        state, loss = train_step(state, (x, y))
        if step % 4 == 0:
            print(
                f"step {step} loss {float(loss):.4f} accuracy {float(evaluate(state[0], (x, y))):.2f}"
            )
    print("donated", old[0]["params"]["Dense_0"]["kernel"].is_deleted())
    print("eval after", float(evaluate(state[0], (x, y))))


if __name__ == "__main__":
    main()
