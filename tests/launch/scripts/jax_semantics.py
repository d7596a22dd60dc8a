"""What a script can do with its jitted functions, printed: the output must be
the same with and without ``deepcontext run`` (each call runs once, methods
bind, ``lower``/``trace``/``eval_shape`` work, donation and errors are JAX's)."""

import functools
import inspect

import jax
import jax.numpy as jnp

runs = []


@jax.jit
def scaled(x):
    """Doubles x."""
    jax.debug.callback(lambda: runs.append(1))  # once per execution
    return 2 * x


@jax.jit(static_argnames="n")  # jax.jit as a decorator factory
def power(x, n):
    return x**n


@jax.jit
def keywords(self, proxy, args):  # names a wrapper might use for itself
    return self + proxy + args


class Layer:
    def __init__(self, w):
        self.w = w

    @functools.partial(jax.jit, static_argnums=0)
    def apply(self, x):
        return x @ self.w


def main() -> None:
    x = jnp.arange(4.0)
    print(
        "keywords", keywords(self=1.0, proxy=2.0, args=3.0).item()
    )  # while the step is searched for
    for _ in range(5):  # the step function: found at its 3rd call, which still runs once
        y = scaled(x)
    jax.effects_barrier()
    print("runs", len(runs), y.tolist())
    print(
        "names", scaled.__name__, scaled.__qualname__, scaled.__doc__, scaled.__wrapped__.__name__
    )
    print("signature", inspect.signature(scaled), inspect.signature(power))
    print(
        "lower",
        "stablehlo" in scaled.lower(x).as_text(),
        scaled.trace(x).jaxpr.eqns[-1].primitive.name,
    )
    print("eval_shape", scaled.eval_shape(x).shape, power.eval_shape(x, n=3).dtype)
    print("power", power(x, n=3).tolist(), power(x, 2).tolist())
    layer = Layer(jnp.eye(4))
    print("method", layer.apply(x).tolist(), Layer.apply(layer, x).tolist())
    print(
        "transforms",
        jax.grad(lambda v: scaled(v).sum())(x).tolist(),
        jax.vmap(scaled)(x[:, None]).shape,
        jax.jit(scaled)(x).tolist(),
    )
    donating = jax.jit(lambda v: v + 1, donate_argnums=0)
    buffer = jnp.ones(3)
    print("donated", donating(buffer).tolist(), buffer.is_deleted())
    try:
        power(jnp.ones((2, 3)) @ jnp.ones((2, 3)), n=2)
    except TypeError as exc:
        print("error", type(exc).__name__, str(exc).splitlines()[0])
    scaled.clear_cache()
    print("after clear", scaled(x).tolist())


if __name__ == "__main__":
    main()
