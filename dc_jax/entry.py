"""What dc_jax tells DeepContext's core about itself: the object of its
``deepcontext.adapters`` entry point (pyproject.toml). Imports no jax."""

from __future__ import annotations

from dc_core.record.adapter import AdapterPackage, Demo

ADAPTER = AdapterPackage(
    name="jax",
    package="dc_jax",
    order=2,
    drivers={"jax": "dc_jax.launch:install", "flax.nnx": "dc_jax.launch:install_nnx"},
    time_loop=("jax", "dc_jax.loop:Profiler"),
    demo=Demo(
        run="dc_jax.demo:run_demo",
        needs=(("jax",), ("flax",), ("optax",)),
        extra="jax",
        label="jax (Flax)",
    ),
)
