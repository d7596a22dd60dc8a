"""A JAX script whose first function called repeatedly from one line is a
jitted augmentation, run over the data before training: only
``--step-function jax_named:train_step`` says which function is the step."""

import jax
import jax.numpy as jnp


@jax.jit
def augment(x, key):
    return x + 0.01 * jax.random.normal(key, x.shape)


def update(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    return w - 0.1 * grad, loss


train_step = jax.jit(update, donate_argnums=0)


def main() -> None:
    x, y = jnp.ones((64, 16)), jnp.zeros((64, 4))
    batches = [augment(x, key) for key in jax.random.split(jax.random.PRNGKey(0), 6)]
    w = jnp.full((16, 4), 0.1)
    for epoch in range(2):
        for batch in batches:
            w, loss = train_step(w, batch, y)
        print(f"epoch {epoch} loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
