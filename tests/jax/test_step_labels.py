"""What a step and a compiled function are called: the function the user wrote,
whatever wraps it (``functools.partial``, ``nnx.jit``, ``shard_map``, ``pmap``)."""

from __future__ import annotations

import textwrap
from functools import partial

import pytest

pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
pytest.importorskip("optax")

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from dc_jax import adapter
from dc_jax.launch import Jitted, _name
from dc_jax.names import qualified_name
from tests.launch.conftest import deepcontext_run, run_profiles


def nnx_train_step(model, x, scale):
    return (model(x) * scale).sum()


def psum_step(x):
    return jax.lax.psum(jnp.tanh(x).sum(), "d")


def test_step_labels_name_the_wrapped_function_not_a_wrappers_repr():
    # Regression: ``nnx.jit(partial(f, ...))`` was labelled
    # ``<flax.nnx.transforms.compilation.JitWrapped object at 0x…>``.
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    made = {
        "nnx.jit": nnx.jit(partial(nnx_train_step, scale=2.0)),
        "jax.jit": jax.jit(jax.shard_map(psum_step, mesh=mesh, in_specs=P("d"), out_specs=P())),
        "jax.pmap": jax.pmap(partial(psum_step), axis_name="d"),
    }
    assert {kind: _name(Jitted(fn, kind)) for kind, fn in made.items()} == {
        "nnx.jit": "nnx.jit nnx_train_step",
        "jax.jit": "jax.jit psum_step",
        "jax.pmap": "jax.pmap psum_step",
    }
    assert qualified_name(partial(partial(nnx_train_step, 1), 2)) == "nnx_train_step"
    assert qualified_name(object()) is None


def test_an_nnx_jit_of_a_partial_compiles_under_the_wrapped_functions_name():
    # nnx.jit compiles an inner function JAX calls ``<unnamed function>``; the
    # compile phase names the function the user wrapped.
    class Doubler(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 4, rngs=rngs)

        def __call__(self, x):
            return self.lin(x) * 2

    names = []

    def listener(event, start, end, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration" and "unnamed" in kwargs.get(
            "fun_name", ""
        ):
            names.append(adapter._compiled_name("<unnamed function>"))

    jax.monitoring.register_event_time_span_listener(listener)
    try:
        nnx.jit(partial(nnx_train_step, scale=3.0))(Doubler(nnx.Rngs(0)), jnp.ones((2, 4)))
    finally:
        adapter._unregister(listener)
    assert names == ["nnx_train_step"]
    assert adapter._compiled_name("train_step") == "train_step"  # a name of the user's own stays


SCRIPTS = {
    "nnx_partial.py": """
        from functools import partial
        import jax.numpy as jnp
        import optax
        from flax import nnx

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.lin = nnx.Linear(8, 8, rngs=rngs)

            def __call__(self, x):
                return self.lin(x)

        def train_step(model, optimizer, x, scale):
            loss, grads = nnx.value_and_grad(lambda m: (m(x) * scale).mean())(model)
            optimizer.update(model, grads)
            return loss

        model = Net(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
        step = nnx.jit(partial(train_step, scale=2.0))
        for _ in range(8):
            loss = step(model, optimizer, jnp.ones((4, 8)))
        print("loss", float(loss))
    """,
    "pmapped.py": """
        import jax
        import jax.numpy as jnp

        def update(w, x):
            loss, grad = jax.value_and_grad(lambda w: jnp.tanh(x @ w).sum())(w)
            return w - 0.1 * jax.lax.pmean(grad, "d"), loss

        step = jax.pmap(update, axis_name="d")
        w, x = jnp.ones((1, 8, 8)), jnp.ones((1, 4, 8))
        for _ in range(8):
            w, loss = step(w, x)
        print("loss", float(loss[0]))
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, label", [("nnx_partial.py", "nnx.jit train_step"), ("pmapped.py", "jax.pmap update")]
)
def test_deepcontext_run_labels_a_wrapped_step_by_its_function(tmp_path, script, label):
    # Regression: an ``nnx.jit(partial(...))`` step was labelled by the wrapper's
    # repr, and a pmapped step was never found.
    source = textwrap.dedent(SCRIPTS[script])
    (tmp_path / script).write_text(source)
    loop = next(n for n, line in enumerate(source.splitlines(), 1) if "= step(" in line)
    done = deepcontext_run(tmp_path, "--steps", "2:3", script)
    assert done.returncode == 0, done.stderr
    [profile] = run_profiles(tmp_path)
    assert (
        profile.step_source
        == f"each call of {label}, called repeatedly at {script}:{loop}; step 0 is call 3"
    )
    assert profile.steps == (2, 5) and len(profile.step_times_ns) == 3
