"""A Flax NNX training script that knows nothing of any profiler: ``nnx.jit``
used as a decorator factory over ``nnx.value_and_grad`` and ``nnx.Optimizer``."""

import jax.numpy as jnp
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(16, 64, rngs=rngs)
        self.layers = nnx.List([nnx.Linear(64, 64, rngs=rngs) for _ in range(2)])
        self.linear2 = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        for layer in self.layers:  # one line, two modules
            x = nnx.relu(layer(x))
        return self.linear2(x)


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def main() -> None:
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = jnp.ones((32, 16)), jnp.arange(32) % 10
    for step in range(10):
        loss = train_step(model, optimizer, x, y)
    print(f"nnx loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
